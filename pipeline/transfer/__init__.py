"""Transfer stage: host batches → device, with one host copy, pinned reusable staging and
asynchronous copies that overlap compute. Runs in any torch loop; never imports Ray.

The names below load on first use: what only reads ``TransferConfig`` (the CLI's parser, a
config check) must not pay for torch, which the feeder needs.
"""

from importlib import import_module
from typing import Any

_WHERE = {"DeviceChoice": "device", "DeviceFeeder": "feeder", "TransferConfig": "config",
          "TransferStats": "stats", "detect_device": "device"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"pipeline.transfer.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pipeline.transfer' has no attribute {name!r}")
