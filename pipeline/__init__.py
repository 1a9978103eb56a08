"""Feedline: keeps GPUs busy in distributed training by moving data well, on Ray.

Importing this package has no side effects: Ray, CUDA and the data are touched only when a
job runs. ``pipeline.run`` and the task protocol (``pipeline.Task``, subclassed to train your own
model and loss; ``pipeline.ClassificationTask``, the built-in one) and Feedline's data in your
own Ray Train loop (``pipeline.prepare`` on the driver, ``pipeline.batches`` in the workers)
are loaded on first use, and so are the errors users catch (also in :mod:`pipeline.errors`).
"""

from importlib import import_module
from typing import Any

_WHERE = {"ClassificationTask": "pipeline.train.task", "RunResult": "pipeline.api",
          "ConfigError": "pipeline.errors", "PlanError": "pipeline.errors",
          "BadSampleThresholdError": "pipeline.errors",
          "Task": "pipeline.train.task", "run": "pipeline.api",
          "batches": "pipeline.feed", "prepare": "pipeline.feed"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
