"""Spans on one rank: where every second of the training phase went.

Runs in the Train worker (no Ray import; picklable only before first use). The loop marks phases,
in the order the real loop runs them (``train/loop.py``)::

    prof = StepProfiler(rank=rank, device=device)
    hook, state = timed_hook(None, process_group, prof.comm_timer)   # exposed all-reduce
    ddp.register_comm_hook(state, hook)
    for epoch in range(epochs):
        with prof.phase("startup"): batch = next(it, None)      # Ray Data starts, first batch
        while batch is not None:                                 # one step:
            with prof.span("forward"): loss = model(batch)       #   data_wait | h2d | forward |
            with prof.span("backward"): loss.backward()          #   backward (comm_exposed
            with prof.span("optimizer"): opt.step()              #   carved out) | optimizer |
            prof.step_done(samples=len(batch))                   #   other
            with prof.span("data_wait"): batch = next(it, None)  # the last one finds no batch
            prof.add("h2d", copy_seconds, within="data_wait")
        with prof.phase("validation"): evaluate()
        with prof.phase("report"):
            summary = prof.epoch_summary(epoch=epoch + 1)        # pushed to the driver
        with prof.phase("checkpoint"): save()
    tail = prof.epoch_summary()        # the last report's rest and the last checkpoint

Two accounts are kept:

- **Steps.** A step's wall runs from the previous ``step_done`` (or the end of the out-of-step
  phase before it, or its first span) to its ``step_done``; ``other`` is the wall minus the named
  phases. ``add(phase, s, within=...)`` carves a duration measured elsewhere out of the span that
  contained it: H2D happens inside ``data_wait``; exposed all-reduce happens inside ``backward``
  (DDP waits for its buckets before ``backward()`` returns).
- **Windows.** ``epoch_summary`` closes a window: every second since the previous one (or since
  the first mark), split into steps, out-of-step phases (:meth:`phase`) and ``untracked`` (the
  rest). An epoch's last ``data_wait`` ends in "no more batches" and never reaches
  ``step_done``: when the next phase starts (or the window closes), that unfinished step is
  counted in the window's phase totals, but not as a step. An open phase is split at the
  window's edge, so the ``report`` phase that calls ``epoch_summary`` is counted partly in this
  window and partly in the next, and nothing is counted twice or lost.

Steps are resolved into seconds in batches of ``_RESOLVE_BATCH`` (and at ``epoch_summary``):
the per-step cost is a few marks and an append. On CUDA the marks are CUDA events (see
:mod:`pipeline.profile._clock`); a batch is resolved once its last event has completed, polled
without blocking — never a sync per span — and only past ``_MAX_PENDING`` waiting steps is the
oldest half read with a sync. Out-of-step phases are few per epoch and resolved when they end.
Each span and phase is also an NVTX range. Disabled, every method returns at once and ``span``
and ``phase`` hand back one shared no-op context manager.

Memory: per-step durations of the current window (9 floats a step, in ``array('d')``), the spans
of the last ``trace_steps`` steps and of the last :data:`_PHASE_EVENTS` phases for the timeline;
all bounded per epoch.
"""

from __future__ import annotations

import logging
from array import array
from collections import deque
from typing import Any

from pipeline.profile._span_records import _NO_SPAN, _Phase, _Span, _Step
from pipeline.profile._step_resolve import _StepResolver
from pipeline.profile._summary import MEASURED_PHASES, OUT_OF_STEP_PHASES, PHASES
from pipeline.profile._windows import _WindowReader
from pipeline.profile.comm import CommTimer
from pipeline.profile.config import ProfileConfig

logger = logging.getLogger(__name__)

# Steps are resolved in batches: the bookkeeping then runs hot in the cache instead of once
# between every two steps of model work (measured: ~3x cheaper per step on a CPU model).
_RESOLVE_BATCH = 16
# Unresolved CUDA steps allowed before the oldest half is read with a blocking sync.
_MAX_PENDING = 64
# Out-of-step phase events kept for the timeline (a few per epoch).
_PHASE_EVENTS = 64


class StepProfiler(_WindowReader, _StepResolver):
    """Per-step and out-of-step phase timing on one rank (Train worker).

    ``trace_steps`` recent steps are kept as Chrome trace events; ``nvtx`` controls the NVTX
    ranges on CUDA; ``clock`` replaces the device's clock (tests drive a virtual one, see
    :mod:`pipeline.profile._clock` for the interface). Building one never touches the GPU.
    Recording is here; reading (``epoch_summary``, ``step_waits``, ``work_per_step``,
    ``trace_events``) is in :mod:`pipeline.profile._windows`, the internals that resolve marks
    into seconds in :mod:`pipeline.profile._step_resolve`.
    """

    def __init__(self, *, rank: int, device: Any, enabled: bool = True, trace_steps: int = 200,
                 nvtx: bool = True, clock: Any = None) -> None:
        if trace_steps < 0:
            raise ValueError(f"profile.trace_steps ({trace_steps}) must be >= 0; "
                             f"use 0 to keep no per-step events")
        self.rank = rank
        self.device = device
        self.enabled = enabled
        self._nvtx = nvtx
        self._clock: Any = clock
        self._mark: Any = None
        self._push: Any = None
        self._pop: Any = None
        self._comm: CommTimer | None = None
        self._spans = {p: _Span(self, p) for p in MEASURED_PHASES}
        self._phase_cms = {p: _Phase(self, p) for p in OUT_OF_STEP_PHASES}
        self._step = _Step()
        self._pending: deque[_Step] = deque()
        self._steps_done = 0
        # The current window: per-step arrays, and seconds outside steps by phase.
        self._window = 0
        self._window_start: Any = None
        self._walls = array("d")
        self._phases = {p: array("d") for p in PHASES}
        self._leads = array("d")
        self._outside = dict.fromkeys((*PHASES, *OUT_OF_STEP_PHASES), 0.0)
        self._samples = 0
        self._open: list[Any] | None = None  # [phase, start mark, unix start] of an open phase
        # Whole run: for the straggler rule (work per step, see work_per_step).
        self._run_steps = 0
        self._run_work = 0.0
        self._trace: deque[tuple[int, int, float, float, list[tuple[str, float, float]]]] = \
            deque(maxlen=trace_steps)
        self._phase_trace: deque[tuple[str, int, float, float]] = deque(maxlen=_PHASE_EVENTS)

    @classmethod
    def from_config(cls, config: ProfileConfig, *, rank: int, device: Any) -> StepProfiler:
        """A profiler as the job's ``profile`` section asks."""
        return cls(rank=rank, device=device, enabled=config.enabled,
                   trace_steps=config.trace_steps, nvtx=config.nvtx)

    # -- recording ------------------------------------------------------------------------

    @property
    def comm_timer(self) -> CommTimer:
        """The timer to pass to :func:`~pipeline.profile.comm.timed_hook`; its per-step exposed
        all-reduce becomes ``comm_exposed``, carved out of ``backward``."""
        if self._comm is None:
            self._comm = CommTimer(device=self.device, enabled=self.enabled,
                                   clock=self._clock_now() if self.enabled else None)
        return self._comm

    def span(self, phase: str) -> Any:
        """Context manager timing ``phase`` of the current step (one of data_wait, h2d,
        forward, backward, comm_exposed, optimizer)."""
        if not self.enabled:
            return _NO_SPAN
        try:
            return self._spans[phase]
        except KeyError:
            raise ValueError(f"unknown profile phase {phase!r}; use one of "
                             f"{', '.join(MEASURED_PHASES)} ('other' is derived; "
                             f"{', '.join(OUT_OF_STEP_PHASES)} go through phase())") from None

    def phase(self, phase: str) -> Any:
        """Context manager timing an out-of-step phase: ``startup`` (an epoch's wait for its
        first batch), ``validation``, ``report`` or ``checkpoint``.

        Entering one ends the current step's account: a step that has spans but no
        ``step_done`` (the epoch's last ``data_wait``) is counted in the window's totals, not
        as a step. The next step starts where the phase ends. Phases do not nest.
        """
        if not self.enabled:
            return _NO_SPAN
        try:
            return self._phase_cms[phase]
        except KeyError:
            raise ValueError(f"unknown out-of-step phase {phase!r}; use one of "
                             f"{', '.join(OUT_OF_STEP_PHASES)} (step phases go through "
                             f"span())") from None

    def add(self, phase: str, seconds: float, *, within: str | None = None) -> None:
        """Add a duration measured elsewhere (e.g. H2D from the transfer stats) to this step.

        ``within`` names the phase whose span contained that time; it is subtracted from it
        so the step's phases still add up to its wall time.
        """
        if not self.enabled:
            return
        for name in (phase, within):
            if name is not None and name not in self._spans:
                raise ValueError(f"unknown profile phase {name!r}; use one of "
                                 f"{', '.join(MEASURED_PHASES)}")
        if seconds < 0:
            raise ValueError(f"profile add({phase!r}, {seconds}): seconds must be >= 0")
        self._step.added.append((phase, float(seconds), within))

    def step_done(self, samples: int) -> None:
        """Close the current step, which processed ``samples`` samples on this rank."""
        if not self.enabled:
            return
        mark = self._mark or self._bind_clock()
        step = self._step
        if step.start is None:  # a step without spans: it starts and ends here
            self._begin_step()
            step.start = mark()
        step.end = mark()
        step.samples = int(samples)
        step.index = self._steps_done
        if self._comm is not None:
            step.comm = self._comm.take_step()
        self._steps_done += 1
        self._pending.append(step)
        # The next step starts where this one ended, so time between steps counts as `other`.
        self._step = _Step(start=step.end)
        pending = self._pending
        if len(pending) >= _RESOLVE_BATCH:
            if self._clock.done(pending[-1].end):  # the last is final, so all before it are
                self._flush()
            elif len(pending) >= _MAX_PENDING:
                for _ in range(len(pending) // 2):
                    self._resolve(pending.popleft())
