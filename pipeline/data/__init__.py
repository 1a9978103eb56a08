"""Preprocessing: sources, decoding on Ray Data CPU workers, the split and the quarantine.

The names below load on first use: Ray actors that unpickle a class from a submodule (the
quarantine log) import this package, and must not pay for pyarrow and the readers.
"""

from importlib import import_module
from typing import Any

_WHERE = {"DataConfig": "config", "DigitsSource": "config", "ImageFolderSource": "config",
          "ParquetSource": "config", "RaySource": "config",
          "DataPlan": "dataset", "build_datasets": "dataset",
          "plan_source": "dataset", "ReaderSpec": "udf.reader", "SampleReader": "udf.reader",
          "validation_mask": "split"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"pipeline.data.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pipeline.data' has no attribute {name!r}")
