"""Device backends for the feeder: the CUDA fast path and the CPU fallback share one interface.

The feeder's producer and consumer call the same methods on either backend (a null-object
pattern), so the rest of the code has no ``if cuda`` branches and the whole feeder runs in CPU
unit tests.

CUDA ordering, per slot::

    producer thread, copy stream:   [record start] H2D(+uint8→float) [record done]
    producer, before refilling:     poll done.query()  → host buffers no longer read
    consumer thread, its stream:    wait_event(done); record_stream(out) for each output tensor

``wait_event`` orders the consumer's kernels after the copy; ``record_stream`` stops the caching
allocator from handing an output tensor's memory back to the copy stream until the consumer's
work on it has run, so a later batch can never overwrite one the consumer is still reading.
Output tensors are fresh allocations (the caching allocator pools them, so steady state makes no
``cudaMalloc``), which is what keeps a handed-out batch valid after the iterator moves on.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np
import torch

from pipeline.transfer.staging import Slot, Staged

# How long a producer waiting for its slot's copy polls without sleeping (see wait_reusable).
_SPIN_S = 0.002


class CpuOps:
    """Fallback: the device is host memory, so the "device copy" is a real memcpy out of staging.

    The copy is needed: yielding views of a staging slot would let the next use of the slot
    rewrite a batch the caller still holds.
    """

    wall_clock_copies = True

    def __init__(self, device: torch.device):
        self.device = device

    def start_thread(self) -> None:
        """Nothing to set up on the CPU."""

    def allocate(self, nbytes: int, pinned: bool) -> torch.Tensor:
        assert not pinned, "decide_pinning never pins for a CPU device"
        return torch.empty(nbytes, dtype=torch.uint8)

    def start_copies(self, slot: Slot) -> None:
        """Nothing to mark on the CPU."""

    def end_copies(self, slot: Slot) -> None:
        """Nothing to mark on the CPU."""

    def to_device(self, staged: Staged,
                  convert: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        """A tensor that owns its memory; a conversion already writes fresh memory."""
        if convert is not None:
            return convert(staged.tensor)
        out = torch.empty_like(staged.tensor, memory_format=torch.contiguous_format)
        if staged.array is None:  # dtypes numpy lacks (bfloat16): torch copies those
            return out.copy_(staged.tensor)
        # A plain memcpy in this thread. torch's own copy would start an OpenMP team in the
        # producer thread that spins against the training loop's threads for the cores.
        np.copyto(out.numpy(), staged.array)
        return out

    def wait_reusable(self, slot: Slot, timeout_s: float, stop: threading.Event) -> float:
        """CPU copies are finished when ``to_device`` returns: always reusable, no timing."""
        return 0.0

    def hand_over(self, slot: Slot, tensors: list[torch.Tensor]) -> None:
        """Nothing to order on the CPU."""


class CudaOps:
    """Fast path: pinned staging, ``non_blocking`` copies on a dedicated copy stream."""

    wall_clock_copies = False

    def __init__(self, device: torch.device):
        self.device = device
        self._stream: torch.cuda.Stream | None = None

    def start_thread(self) -> None:
        """Producer thread: bind the device and make the copy stream this thread's current
        stream (both are per thread in CUDA), once, instead of entering a stream context for
        every batch."""
        torch.cuda.set_device(self.device)
        self._stream = _copy_stream(self.device)
        torch.cuda.set_stream(self._stream)

    def allocate(self, nbytes: int, pinned: bool) -> torch.Tensor:
        return torch.empty(nbytes, dtype=torch.uint8, pin_memory=pinned)

    def start_copies(self, slot: Slot) -> None:
        """Before a batch's copies and conversions (queued on the copy stream, this thread's
        current one): the slot's start event."""
        assert self._stream is not None, "start_thread() runs first"
        if slot.done is None:
            slot.start = torch.cuda.Event(enable_timing=True)
            slot.done = torch.cuda.Event(enable_timing=True)
        slot.start.record(self._stream)

    def end_copies(self, slot: Slot) -> None:
        """After them: the slot's done event, which ``wait_reusable`` and the consumer wait on."""
        slot.done.record(self._stream)
        slot.timing_pending = True

    def to_device(self, staged: Staged,
                  convert: Callable[[torch.Tensor], torch.Tensor] | None = None) -> torch.Tensor:
        # Allocated on the copy stream (this thread's current one); the consumer's record_stream
        # keeps the block from being reused before its own work on it is done.
        moved = staged.tensor.to(self.device, non_blocking=True)
        return convert(moved) if convert is not None else moved

    def wait_reusable(self, slot: Slot, timeout_s: float, stop: threading.Event) -> float:
        """Wait until the slot's last copy finished; return that copy's device seconds.

        Polls ``query()`` instead of ``synchronize()`` so the wait has a timeout and notices
        ``stop``. In steady state the copy finished long ago and this returns at once. When the
        link is the bottleneck the copy ends within microseconds of being asked for, and a
        ``sleep`` (50 µs or more on Linux, whatever it is asked for) would add that much to
        every batch: the first ``_SPIN_S`` only yield the GIL, then the pauses back off.
        """
        if slot.done is None or not slot.timing_pending:
            return 0.0
        now = time.monotonic()
        spin_until, deadline = now + _SPIN_S, now + timeout_s
        pause = 1e-5
        while not slot.done.query():
            if stop.is_set():
                return 0.0
            now = time.monotonic()
            if now > deadline:
                raise TimeoutError(
                    f"a host→device copy on {self.device} did not finish within {timeout_s} s; "
                    "the GPU may be hung or oversubscribed")
            if now < spin_until:
                time.sleep(0)  # gives up the GIL and the core, returns at once
                continue
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)
        slot.timing_pending = False
        return slot.start.elapsed_time(slot.done) / 1000.0

    def hand_over(self, slot: Slot, tensors: list[torch.Tensor]) -> None:
        """Consumer thread: order its current stream after the copy and pin the outputs to it."""
        stream = torch.cuda.current_stream(self.device)
        stream.wait_event(slot.done)
        for tensor in tensors:
            tensor.record_stream(stream)


_STREAMS: dict[torch.device, torch.cuda.Stream] = {}
_STREAMS_LOCK = threading.Lock()


def _copy_stream(device: torch.device) -> torch.cuda.Stream:
    """The process's copy stream for ``device``, shared by every feeder. The caching allocator
    keeps freed blocks per stream: a feeder per epoch on a stream of its own would leave its
    blocks cached for a stream no one uses again and ``cudaMalloc`` new ones (tests/gpu saw one
    new segment per feeder on an H200). Feeders running at once queue their copies on it in
    order, which the one host-to-device link does anyway."""
    with _STREAMS_LOCK:
        if device not in _STREAMS:
            _STREAMS[device] = torch.cuda.Stream(device=device)
        return _STREAMS[device]


def ops_for(device: torch.device) -> CpuOps | CudaOps:
    """The backend for ``device`` (only ``cpu`` and ``cuda`` reach here; see detect_device)."""
    return CudaOps(device) if device.type == "cuda" else CpuOps(device)
