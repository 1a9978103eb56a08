"""Per-step spans on one rank: where each training step's time went.

Runs in the Train worker (no Ray import; picklable only before first use). The loop marks phases::

    prof = StepProfiler(rank=rank, device=device)
    hook, state = timed_hook(None, process_group, prof.comm_timer)   # exposed all-reduce
    ddp.register_comm_hook(state, hook)
    for batch in batches:                          # one step:
        with prof.span("data_wait"): batch = next(it)      #   data_wait | h2d | forward |
        prof.add("h2d", copy_seconds, within="data_wait")  #   backward (comm_exposed carved
        with prof.span("forward"): loss = model(batch)     #   out of it) | optimizer | other
        with prof.span("backward"): loss.backward()
        with prof.span("optimizer"): opt.step()
        prof.step_done(samples=len(batch))
    summary = prof.epoch_summary()

``other`` is derived: step wall minus the named phases, so a step's phases add up to its wall.
The step wall runs from the previous ``step_done`` (or the step's first span after an epoch
boundary) to this one. ``add(phase, s, within=...)`` carves a duration measured elsewhere out of
the span that contained it, so nothing is counted twice: the transfer stats' H2D time happens
inside ``data_wait``; exposed all-reduce happens inside ``backward`` (DDP waits for its buckets
before ``backward()`` returns), which is what the comm timer's steps are carved from.

Steps are resolved into seconds in batches of ``_RESOLVE_BATCH`` (and at ``epoch_summary``):
the per-step cost is a few marks and an append. On CUDA the marks are CUDA events (see
:mod:`pipeline.profile._clock`); a batch is resolved once its last event has completed, polled
without blocking — never a sync per span — and only past ``_MAX_PENDING`` waiting steps is the
oldest half read with a sync. Each span is also an NVTX range. Disabled, every method returns
at once and ``span`` hands back one shared no-op context manager.

Memory: per-step durations of the current epoch (8 floats a step, in ``array('d')``) and the
spans of the last ``trace_steps`` steps for the timeline; both stay bounded per epoch.
"""

from __future__ import annotations

import logging
from array import array
from collections import deque
from typing import Any

from pipeline.profile._clock import make_clock
from pipeline.profile._summary import MEASURED_PHASES, PHASES, summarise
from pipeline.profile.comm import CommTimer
from pipeline.profile.config import ProfileConfig

logger = logging.getLogger(__name__)

# Steps are resolved in batches: the bookkeeping then runs hot in the cache instead of once
# between every two steps of model work (measured: ~3x cheaper per step on a CPU model).
_RESOLVE_BATCH = 16
# Unresolved CUDA steps allowed before the oldest half is read with a blocking sync.
_MAX_PENDING = 64
_TRACK = {name: i + 1 for i, name in enumerate(PHASES)}  # tid 0 is the whole step


class _NoSpan:
    """The shared no-op span of a disabled profiler."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    """A reusable context manager for one phase (one per phase, built once)."""

    __slots__ = ("_prof", "_phase", "_start")

    def __init__(self, prof: StepProfiler, phase: str) -> None:
        self._prof, self._phase, self._start = prof, phase, None

    # The hot path: bound methods cached on the profiler, NVTX calls only when on.
    def __enter__(self) -> None:
        prof = self._prof
        mark = prof._mark or prof._bind_clock()
        step = prof._step
        if step.start is None:
            step.start = mark()
        if prof._push is not None:
            prof._push(self._phase)
        self._start = mark()

    def __exit__(self, *exc: Any) -> None:
        prof = self._prof
        end = prof._mark()
        if prof._pop is not None:
            prof._pop()
        prof._step.spans.append((self._phase, self._start, end))


class _Step:
    """Marks of one step, resolved into seconds once its last mark is final."""

    __slots__ = ("start", "end", "spans", "added", "comm", "samples", "index")

    def __init__(self, start: Any = None) -> None:
        self.start = start
        self.end: Any = None
        self.spans: list[tuple[str, Any, Any]] = []
        self.added: list[tuple[str, float, str | None]] = []
        self.comm: Any = None
        self.samples = 0
        self.index = 0


class StepProfiler:
    """Per-step phase timing on one rank (Train worker).

    ``trace_steps`` recent steps are kept as Chrome trace events; ``nvtx`` controls the NVTX
    ranges on CUDA. Building one never touches the GPU.
    """

    def __init__(self, *, rank: int, device: Any, enabled: bool = True, trace_steps: int = 200,
                 nvtx: bool = True) -> None:
        if trace_steps < 0:
            raise ValueError(f"profile.trace_steps ({trace_steps}) must be >= 0; "
                             f"use 0 to keep no per-step events")
        self.rank = rank
        self.device = device
        self.enabled = enabled
        self._nvtx = nvtx
        self._clock: Any = None
        self._mark: Any = None
        self._push: Any = None
        self._pop: Any = None
        self._comm: CommTimer | None = None
        self._spans = {p: _Span(self, p) for p in MEASURED_PHASES}
        self._step = _Step()
        self._pending: deque[_Step] = deque()
        self._steps_done = 0
        self._walls = array("d")
        self._phases = {p: array("d") for p in PHASES}
        self._samples = 0
        self._trace: deque[tuple[int, float, float, list[tuple[str, float, float]]]] = deque(
            maxlen=trace_steps)

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
        """Context manager timing ``phase`` (one of data_wait, h2d, forward, backward,
        comm_exposed, optimizer)."""
        if not self.enabled:
            return _NO_SPAN
        try:
            return self._spans[phase]
        except KeyError:
            raise ValueError(f"unknown profile phase {phase!r}; use one of "
                             f"{', '.join(MEASURED_PHASES)} ('other' is derived)") from None

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

    # -- reading --------------------------------------------------------------------------

    def epoch_summary(self, *, reset: bool = True) -> dict[str, Any]:
        """Sums, p50 and p99 per phase (seconds), steps, samples and wall since the last reset.

        ``reset`` starts a new epoch: the next step's wall starts at its first span, so time
        spent between epochs (validation, checkpoints) is not charged to a step.
        """
        self._flush()
        summary = summarise(rank=self.rank, walls=self._walls, phases=self._phases,
                            samples=self._samples)
        if reset:
            self._walls = array("d")
            self._phases = {p: array("d") for p in PHASES}
            self._samples = 0
            if self._clock is not None and self._step.start is not None and not self._step.spans:
                self._clock.release(self._step.start)
                self._step.start = None
        return summary

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace ``X`` events of the last ``trace_steps`` resolved steps of this rank.

        ``pid`` is the rank, ``tid`` 0 the whole step and 1.. one track per phase in
        :data:`PHASES` order; ``ts``/``dur`` in microseconds of Unix time.
        """
        self._flush()
        events: list[dict[str, Any]] = []
        for index, t0, wall, spans in self._trace:
            events.append({"name": f"step {index}", "ph": "X", "pid": self.rank, "tid": 0,
                           "ts": t0 * 1e6, "dur": wall * 1e6, "cat": "step",
                           "args": {"step": index}})
            for phase, ts, dur in spans:
                events.append({"name": phase, "ph": "X", "pid": self.rank, "tid": _TRACK[phase],
                               "ts": ts * 1e6, "dur": dur * 1e6, "cat": "phase",
                               "args": {"step": index}})
        return events

    # -- internals ------------------------------------------------------------------------

    def _clock_now(self) -> Any:
        if self._clock is None:
            self._clock = make_clock(self.device, nvtx=self._nvtx)
        return self._clock

    def _bind_clock(self) -> Any:
        clock = self._clock_now()
        self._mark = clock.mark
        if getattr(clock, "nvtx", False):
            self._push, self._pop = clock.push, clock.pop
        return self._mark

    def _flush(self) -> None:
        while self._pending:
            self._resolve(self._pending.popleft())

    def _resolve(self, step: _Step) -> None:
        clock = self._clock
        wall = max(0.0, clock.seconds(step.start, step.end))
        seconds = dict.fromkeys(MEASURED_PHASES, 0.0)
        # (phase, start seconds from step start, duration): start offsets place carved phases.
        placed: list[tuple[str, float, float]] = []
        for phase, a, b in step.spans:
            dur = max(0.0, clock.seconds(a, b))
            seconds[phase] += dur
            placed.append((phase, clock.seconds(step.start, a), dur))
        added = list(step.added)
        if step.comm is not None:
            exposed = self._comm.resolve(step.comm) if self._comm is not None else 0.0
            if exposed > 0:
                added.append(("comm_exposed", exposed, "backward"))
        for phase, dur, within in added:
            if within is not None:
                dur = min(dur, seconds[within])
                seconds[within] -= dur
            seconds[phase] += dur
            # Placed at the end of the containing span (or of the step): where the time went
            # inside that span is not known, only how much it was.
            host = [p for p in placed if p[0] == within]
            end = host[-1][1] + host[-1][2] if host else wall
            placed.append((phase, max(0.0, end - dur), dur))
            if host:
                h_phase, h_start, h_dur = host[-1]
                placed[placed.index(host[-1])] = (h_phase, h_start, max(0.0, h_dur - dur))
        named = sum(seconds.values())
        self._walls.append(wall)
        for phase in MEASURED_PHASES:
            self._phases[phase].append(seconds[phase])
        self._phases["other"].append(max(0.0, wall - named))
        self._samples += step.samples
        if self._trace.maxlen:
            t0 = clock.unix(step.start)
            self._trace.append((step.index, t0, wall,
                                [(p, t0 + s, d) for p, s, d in placed if d > 0]))
        # Each step owns its start and span marks; its end mark is the next step's start.
        clock.release(step.start, *(m for _, a, b in step.spans for m in (a, b)))
