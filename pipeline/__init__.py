"""Feedline: keeps GPUs busy in distributed training by moving data well, on Ray.

Importing this package has no side effects: Ray, CUDA and the data are touched only when a
job runs. ``pipeline.run`` is loaded on first use.
"""

from typing import Any

__all__ = ["RunResult", "run"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from pipeline import api

        return getattr(api, name)
    raise AttributeError(f"module 'pipeline' has no attribute {name!r}")
