"""Exposed all-reduce per step, measured from DDP's communication-hook futures.

Method. DDP calls its comm hook once per gradient bucket, at the moment every gradient in that
bucket has been computed (the bucket is *ready*), and waits for the future the hook returns
before ``loss.backward()`` returns. :func:`timed_hook` wraps any hook (the default all-reduce,
fp16/bf16 compression, PowerSGD) so that, per bucket, it marks *ready* when DDP calls it and
*done* in a callback chained on the returned future::

    backward compute  ████████████████████▌          (last bucket ready = compute finished)
    bucket 0 all-red.       ▓▓▓▓▓▓                   hidden behind backward
    bucket 1 all-red.                ▓▓▓▓▓▓▓▓▓▓▓     ← exposed: last ready → last done
                                          |<--->|

``comm_exposed`` = last *done* − last *ready*, clamped at zero: the time backward spends waiting
for gradients to be reduced after its own compute has ended. Marks come from the profiler's
clock: ``perf_counter`` on CPU (gloo completes futures on its own threads, when the data has
arrived), CUDA events on a GPU (recorded on the current stream, so a *done* event completes
when the NCCL kernel has, not when the host queued it).

Limits, stated so the numbers are read correctly:

- The last bucket's ready mark stands in for "backward compute finished". DDP's own finalisation
  after it (copying reduced buckets back into ``.grad`` without ``gradient_as_bucket_view``) is
  counted as exposed communication.
- Time a fast rank spends waiting for a slow peer is exposed communication *on the fast rank*.
  That is why straggler detection compares each rank's step time minus ``comm_exposed``.
- Wrapping adds a Python callback per bucket (a few microseconds); DDP's built-in C++
  all-reduce is replaced by the equivalent Python ``allreduce_hook`` when no hook was chosen.
- Steps under ``no_sync`` call no hook and report zero; the step that finally synchronises
  carries all the exposed time.

Runs in the Train worker (no Ray). ``torch.distributed`` is imported only by :func:`timed_hook`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pipeline.profile._clock import make_clock

logger = logging.getLogger(__name__)


@dataclass
class CommStep:
    """The ready and done marks of one step's buckets, in the order they happened."""

    ready: list[Any] = field(default_factory=list)
    done: list[Any] = field(default_factory=list)


class CommTimer:
    """Per-step bucket ready/done marks from a wrapped DDP comm hook (Train worker).

    Thread safe: DDP calls the hook from the autograd thread and completes futures on
    process-group threads. A :class:`~pipeline.profile.spans.StepProfiler` owns one
    (``prof.comm_timer``) and takes each step's marks at ``step_done``; standalone, call
    :meth:`step_exposed` after each ``backward()``.
    """

    def __init__(self, *, device: Any, enabled: bool = True, clock: Any = None) -> None:
        self.device = device
        self.enabled = enabled
        self._clock = clock
        self._lock = threading.Lock()
        self._step = CommStep()
        self.buckets_seen = 0

    def on_ready(self) -> None:
        """A bucket's gradients are all computed (called by the wrapped hook)."""
        if self.enabled:
            mark = self._clock_now().mark()
            with self._lock:
                self._step.ready.append(mark)
                self.buckets_seen += 1

    def on_done(self) -> None:
        """A bucket's reduction has completed (called from the future's callback)."""
        if self.enabled:
            mark = self._clock_now().mark()
            with self._lock:
                self._step.done.append(mark)

    def take_step(self) -> CommStep:
        """This step's marks; the next bucket starts a new step."""
        with self._lock:
            step, self._step = self._step, CommStep()
        return step

    def resolve(self, step: CommStep) -> float:
        """Exposed seconds of ``step`` (last done − last ready, >= 0) and release its marks."""
        if not step.ready or not step.done:
            if step.ready and not step.done:
                logger.debug("comm step with %d ready buckets and no completed future",
                             len(step.ready))
            self._clock_now().release(*step.ready, *step.done)
            return 0.0
        clock = self._clock_now()
        last_ready = step.ready[-1]
        exposed = max(clock.seconds(last_ready, d) for d in step.done)
        clock.release(*step.ready, *step.done)
        return max(0.0, exposed)

    def step_exposed(self) -> float:
        """Take and resolve this step's marks (standalone use; syncs on CUDA)."""
        return self.resolve(self.take_step())

    def _clock_now(self) -> Any:
        if self._clock is None:
            self._clock = make_clock(self.device, nvtx=False)
        return self._clock


@dataclass
class TimedHookState:
    """The state DDP passes to the wrapped hook: the original state and the timer."""

    inner: Any
    timer: CommTimer


def timed_hook(hook: Callable[[Any, Any], Any] | None, state: Any,
               timer: CommTimer) -> tuple[Callable[[Any, Any], Any], TimedHookState]:
    """Wrap a DDP comm hook so ``timer`` sees every bucket; returns ``(hook, state)`` for
    ``ddp.register_comm_hook(state, hook)``.

    ``hook=None`` means DDP's default all-reduce (``allreduce_hook``; its state is the process
    group or None).
    """
    if hook is None:
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

        hook = allreduce_hook
    if not callable(hook):
        raise TypeError(f"timed_hook: hook ({hook!r}) must be a DDP comm hook "
                        f"(state, bucket) -> Future, or None for the default all-reduce")

    # Left unannotated on purpose: DDP inspects the signature, needs a parameter named `bucket`,
    # and rejects string annotations (this module uses postponed annotations).
    def timed(state, bucket):
        state.timer.on_ready()
        fut = hook(state.inner, bucket)

        def record(f):
            state.timer.on_done()
            return f.value()

        return fut.then(record)

    timed.__name__ = f"timed_{getattr(hook, '__name__', 'hook')}"
    timed.__qualname__ = timed.__name__
    return timed, TimedHookState(inner=state, timer=timer)
