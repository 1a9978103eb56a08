"""The staging pool: a ring of reusable host buffers, one byte buffer per field per slot.

Runs in the feeder's producer thread (Train worker). Every batch is copied once, from the
caller's arrays straight into a slot's buffers; the device copy reads from there. Buffers are
sized from the first batch and reallocated only when a field outgrows its buffer, and each
allocation is counted, so "steady state allocates nothing" is a number a test can read.

::

    slot 0 [image bytes][label bytes]   ← being filled by the producer (host copy)
    slot 1 [image bytes][label bytes]   ← H2D copy in flight / ready for the consumer
    ...                                   (ring of depth + 1 slots)

Buffers are untyped bytes so a field may change dtype without reallocating; a typed view of the
first ``nbytes`` is cut per batch. Page-locking is decided per allocation by
:func:`decide_pinning`: small batches are left pageable because registering page-locked memory
costs more than it saves on a small copy.
"""

from __future__ import annotations

import logging
import math
import threading
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import torch

from pipeline.transfer.stats import TransferStats

logger = logging.getLogger(__name__)

# Buffers are rounded up so a field whose size wobbles by a few bytes does not reallocate.
_ROUND_BYTES = 4096


def decide_pinning(pin_memory: bool | Literal["auto"], device_type: str, batch_bytes: int,
                   min_pin_bytes: int) -> tuple[bool, str]:
    """Whether staging for a batch of ``batch_bytes`` is page-locked, and why."""
    if device_type != "cuda":
        extra = " (pin_memory=true has no effect without CUDA)" if pin_memory is True else ""
        return False, f"pageable: device is {device_type}, page-locking needs CUDA{extra}"
    if pin_memory is False:
        return False, "pageable: pin_memory=false"
    if pin_memory is True:
        return True, "pinned: pin_memory=true"
    if batch_bytes < min_pin_bytes:
        return False, (f"pageable: batch ({format_bytes(batch_bytes)}) < min_pin_bytes "
                       f"({format_bytes(min_pin_bytes)}); pinning costs more than it saves")
    return True, (f"pinned: cuda and batch ({format_bytes(batch_bytes)}) >= min_pin_bytes "
                  f"({format_bytes(min_pin_bytes)})")


def format_bytes(n: int) -> str:
    """``1536`` → ``1.5 KiB``."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


class Staged(NamedTuple):
    """One field's place in a slot: the tensor view, and the same memory as a numpy array
    (None for dtypes numpy lacks), both made once per shape instead of once per batch."""

    tensor: torch.Tensor
    array: Any


@dataclass
class Slot:
    """One ring position: its buffers and (CUDA) the events that order reuse."""

    index: int
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)
    views: dict[str, tuple[torch.dtype, tuple[int, ...], Staged]] = field(default_factory=dict)
    """The typed view each field had last time: a batch shaped as the last one reuses it."""
    start: Any = None
    """CUDA event recorded before this slot's device copies (None on CPU)."""
    done: Any = None
    """CUDA event recorded after them; the slot's host buffers are reusable once it completes."""
    timing_pending: bool = False


class StagingPool:
    """``size`` slots of host buffers (producer thread only; not picklable, not thread-safe).

    ``allocate(nbytes, pinned)`` returns a 1-D uint8 CPU tensor; the feeder passes its device
    backend's allocator so this class never touches CUDA itself.
    """

    def __init__(self, size: int, *, allocate, pin_memory: bool | Literal["auto"],
                 device_type: str, min_pin_bytes: int, stats: TransferStats,
                 lock: threading.Lock):
        assert size >= 2, "a ring needs one slot being filled and one in flight"
        self.slots = [Slot(i) for i in range(size)]
        self._allocate = allocate
        self._pin_memory = pin_memory
        self._device_type = device_type
        self._min_pin_bytes = min_pin_bytes
        self._stats = stats
        self._lock = lock
        self._last_reason = ""

    def view(self, slot: Slot, path: str, dtype: torch.dtype, shape: tuple[int, ...],
             batch_bytes: int) -> Staged:
        """A typed, contiguous view of ``slot``'s buffer for ``path``, grown if too small."""
        last = slot.views.get(path)
        if last is not None and last[0] == dtype and last[1] == shape:
            return last[2]
        nbytes = math.prod(shape) * dtype.itemsize
        buf = slot.buffers.get(path)
        if buf is None or buf.numel() < nbytes:
            buf = self._grow(slot, path, nbytes, batch_bytes, replacing=buf)
        tensor = buf[:nbytes].view(dtype).view(shape)
        try:
            array = tensor.numpy()
        except TypeError:  # dtypes numpy lacks (bfloat16): torch copies those
            array = None
        staged = Staged(tensor, array)
        slot.views[path] = (dtype, shape, staged)
        return staged

    def release(self) -> None:
        """Drop every buffer (the caller makes sure no copy still reads them)."""
        for slot in self.slots:
            slot.buffers.clear()
            slot.views.clear()
        with self._lock:
            self._stats.pool_bytes = 0

    def _grow(self, slot: Slot, path: str, nbytes: int, batch_bytes: int,
              replacing: torch.Tensor | None) -> torch.Tensor:
        pinned, reason = decide_pinning(self._pin_memory, self._device_type, batch_bytes,
                                        self._min_pin_bytes)
        if reason != self._last_reason:
            logger.info("transfer staging: %s", reason)
            self._last_reason = reason
        capacity = max(-(-nbytes // _ROUND_BYTES) * _ROUND_BYTES, _ROUND_BYTES)
        buf = self._allocate(capacity, pinned)
        slot.buffers[path] = buf
        with self._lock:
            stats = self._stats
            stats.pool_allocations += 1
            stats.pool_bytes += capacity - (replacing.numel() if replacing is not None else 0)
            stats.pinned, stats.pin_reason = pinned, reason
            if replacing is not None:
                stats.pool_grows += 1
        if replacing is not None:
            logger.debug("staging slot %d field %r grown to %s", slot.index, path,
                         format_bytes(capacity))
        return buf


