"""Training: the resource planner, the Ray Train job, the per-worker loop and the tasks it trains.

The names below load on first use: Ray actors that unpickle a class from a submodule (the run's
reporter) import this package, and must not pay for torch.
"""

from importlib import import_module
from typing import Any

_WHERE = {"TrainConfig": "config", "MODELS": "models", "build_model": "models",
          "PlanError": "planner", "ResourcePlan": "planner", "plan_resources": "planner",
          "ClassificationTask": "task", "TASKS": "task", "Task": "task",
          "resolve_task": "task"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"pipeline.train.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pipeline.train' has no attribute {name!r}")
