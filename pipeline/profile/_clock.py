"""Clocks the profiler reads: the host's perf_counter on a CPU, CUDA events on a GPU.

Null-object pattern: :class:`~pipeline.profile.spans.StepProfiler` and
:class:`~pipeline.profile.comm.CommTimer` hold one clock and never branch on the device. A *mark*
is an opaque point in time — a float on the host, a recorded ``torch.cuda.Event`` on a GPU — and
only the clock that made it can compare two marks.

Why events on CUDA: kernels are queued asynchronously, so ``time.perf_counter`` around
``model(x)`` measures how long the host took to *queue* the work, not how long the GPU ran it.
An event recorded on the current stream is timestamped when the GPU reaches it, so the time
between two events is what the GPU experienced — including idle gaps the host caused (a
``data_wait`` span on CUDA is the time the GPU sat idle for lack of input, which is the number
that matters). Events are read lazily (:meth:`CudaClock.done` polls, never blocks), so profiling
does not add a device synchronisation per span. Events are pooled and reused.

Runs in the Train worker; nothing here is pickled. ``torch`` is imported only by the CUDA clock.
"""

from __future__ import annotations

import threading
import time
from typing import Any


class HostClock:
    """``time.perf_counter`` marks; every mark is final as soon as it is taken."""

    nvtx = False

    def __init__(self) -> None:
        # One anchor pairs perf_counter with the Unix clock so ranks on different processes
        # line up on one timeline (to within the hosts' clock sync).
        self._perf0 = time.perf_counter()
        self._unix0 = time.time()

    # The bare builtin: the profiler calls it twice per span, so no Python frame around it.
    mark = staticmethod(time.perf_counter)

    def done(self, mark: Any) -> bool:
        return True

    def seconds(self, start: Any, end: Any) -> float:
        return end - start

    def unix(self, mark: Any) -> float:
        return self._unix0 + (mark - self._perf0)

    def release(self, *marks: Any) -> None:
        pass

    def push(self, name: str) -> None:
        pass

    def pop(self) -> None:
        pass


class CudaClock:
    """CUDA-event marks on the current stream of ``device``, plus optional NVTX ranges.

    Built lazily by the profiler at its first span (constructors never touch the GPU). Thread
    safe: the DDP comm hook records marks from autograd and process-group threads.
    """

    def __init__(self, device: Any, *, nvtx: bool = True) -> None:
        import torch

        self._torch = torch
        self._device = device
        self.nvtx = nvtx
        self._pool: list[Any] = []
        self._lock = threading.Lock()
        self._anchor: Any = None
        self._anchor_unix = 0.0

    def mark(self) -> Any:
        with self._lock:
            event = self._pool.pop() if self._pool else None
        if event is None:
            event = self._torch.cuda.Event(enable_timing=True)
        event.record(self._torch.cuda.current_stream(self._device))
        if self._anchor is None:
            # A private anchor event, never released: unix(mark) = anchor time + GPU elapsed.
            anchor = self._torch.cuda.Event(enable_timing=True)
            anchor.record(self._torch.cuda.current_stream(self._device))
            self._anchor, self._anchor_unix = anchor, time.time()
        return event

    def done(self, mark: Any) -> bool:
        return bool(mark.query())

    def seconds(self, start: Any, end: Any) -> float:
        # Only blocks when a caller forces resolution (end of epoch, too many pending steps);
        # the per-step path waits for done() instead. Both ends must have completed: a comm
        # hook's marks can sit on different streams.
        for event in (start, end):
            if not event.query():
                event.synchronize()
        return start.elapsed_time(end) / 1000.0

    def unix(self, mark: Any) -> float:
        return self._anchor_unix + self.seconds(self._anchor, mark)

    def release(self, *marks: Any) -> None:
        with self._lock:
            self._pool.extend(marks)

    def push(self, name: str) -> None:
        self._torch.cuda.nvtx.range_push(name)

    def pop(self) -> None:
        self._torch.cuda.nvtx.range_pop()


def make_clock(device: Any, *, nvtx: bool = True) -> HostClock | CudaClock:
    """The clock for ``device``: CUDA events for a ``cuda`` device, the host clock otherwise."""
    if getattr(device, "type", str(device).split(":")[0]) == "cuda":
        return CudaClock(device, nvtx=nvtx)
    return HostClock()
