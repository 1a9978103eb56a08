"""Training, inside a Ray Train worker: the loop Feedline owns, the tasks it trains, the models.
(The driver's side of a job is :mod:`pipeline.job`; connecting and planning are
:mod:`pipeline.cluster`'s.)

The names below load on first use: Ray actors that unpickle a class from a submodule (the run's
reporter) import this package, and must not pay for torch.
"""

from importlib import import_module
from typing import Any

_WHERE = {"TrainConfig": "config", "MODELS": "models", "build_model": "models",
          "ClassificationTask": "task", "TASKS": "task", "Task": "task",
          "resolve_task": "task"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"pipeline.train.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pipeline.train' has no attribute {name!r}")
