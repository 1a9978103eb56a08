"""Counters of one feeder's work, read by the trainer and later by the profiler.

The producer thread updates a private :class:`TransferStats` under a lock; ``feeder.stats``
hands out a snapshot, so a reader never sees a half-updated record and never races the thread.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass
class TransferStats:
    """What a :class:`~pipeline.transfer.feeder.DeviceFeeder` did (Train worker, plain data)."""

    batches: int = 0
    """Batches handed to the consumer."""
    bytes: int = 0
    """Payload bytes copied host → device (uint8 fields count as uint8)."""
    host_copies: int = 0
    """Copies from the caller's arrays into a staging slot (one per moved field per batch)."""
    host_copy_bytes: int = 0
    """Bytes written into staging, counted at each copy call; equals ``bytes`` when every byte
    is copied exactly once on the host."""
    device_copies: int = 0
    """Copies out of a staging slot into device memory (on CPU this is a second memcpy)."""
    pool_allocations: int = 0
    """Staging buffers allocated (initial sizing plus growth)."""
    pool_grows: int = 0
    """Staging buffers reallocated because a larger batch arrived."""
    pool_bytes: int = 0
    """Bytes currently held by the staging pool."""
    consumer_wait_s: float = 0.0
    """Seconds ``next()`` blocked waiting for a batch (input-bound time)."""
    copy_s: float = 0.0
    """Seconds spent copying: host copies plus device copies (CUDA: measured by events)."""
    host_copy_s: float = 0.0
    """The host-copy share of ``copy_s`` (producer thread wall time)."""
    pinned: bool = False
    """Whether the staging buffers last allocated are page-locked."""
    pin_reason: str = "not decided: no batch yet"
    """Why they are (or are not) page-locked."""
    device: str = ""
    """Where batches go and why, from :func:`~pipeline.transfer.device.detect_device`."""

    def as_dict(self) -> dict[str, Any]:
        """Plain values for JSON run summaries."""
        return dataclasses.asdict(self)

    def snapshot(self) -> TransferStats:
        """An independent copy."""
        return dataclasses.replace(self)

    def merged(self, later: TransferStats) -> TransferStats:
        """Totals over two feeders (e.g. two epochs); state fields come from ``later``."""
        totals = {f.name: getattr(self, f.name) + getattr(later, f.name)
                  for f in dataclasses.fields(self)
                  if f.name not in _STATE and isinstance(getattr(self, f.name), (int, float))
                  and not isinstance(getattr(self, f.name), bool)}
        return dataclasses.replace(later, **totals)


_STATE = ("pool_bytes", "pinned", "pin_reason", "device")

