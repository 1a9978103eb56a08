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
from collections.abc import Sequence
from typing import Any

from pipeline.profile._clock import make_clock
from pipeline.profile._summary import (
    MEASURED_PHASES,
    OUT_OF_STEP_PHASES,
    PHASES,
    TRACKS,
    summarise,
    training_block,
)
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
_TRACK = {name: i for i, name in enumerate(TRACKS)}  # tid 0 is the whole step


class _NoSpan:
    """The shared no-op span of a disabled profiler."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


_NO_SPAN = _NoSpan()


class _Span:
    """A reusable context manager for one step phase (one per phase, built once)."""

    __slots__ = ("_prof", "_phase", "_start")

    def __init__(self, prof: StepProfiler, phase: str) -> None:
        self._prof, self._phase, self._start = prof, phase, None

    # The hot path: bound methods cached on the profiler, NVTX calls only when on.
    def __enter__(self) -> None:
        prof = self._prof
        mark = prof._mark or prof._bind_clock()
        step = prof._step
        if step.start is None:
            prof._begin_step()
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


class _Phase:
    """A reusable context manager for one out-of-step phase."""

    __slots__ = ("_prof", "_phase")

    def __init__(self, prof: StepProfiler, phase: str) -> None:
        self._prof, self._phase = prof, phase

    def __enter__(self) -> None:
        self._prof._enter_phase(self._phase)

    def __exit__(self, *exc: Any) -> None:
        self._prof._exit_phase(self._phase)


class _Step:
    """Marks of one step, resolved into seconds once its last mark is final."""

    __slots__ = ("start", "end", "spans", "added", "comm", "samples", "index", "lead")

    def __init__(self, start: Any = None, lead: float = 0.0) -> None:
        self.start = start
        self.end: Any = None
        self.spans: list[tuple[str, Any, Any]] = []
        self.added: list[tuple[str, float, str | None]] = []
        self.comm: Any = None
        self.samples = 0
        self.index = 0
        # Seconds this step's batch was waited for outside it (the epoch's start-up).
        self.lead = lead


class StepProfiler:
    """Per-step and out-of-step phase timing on one rank (Train worker).

    ``trace_steps`` recent steps are kept as Chrome trace events; ``nvtx`` controls the NVTX
    ranges on CUDA; ``clock`` replaces the device's clock (tests drive a virtual one, see
    :mod:`pipeline.profile._clock` for the interface). Building one never touches the GPU.
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

    # -- reading --------------------------------------------------------------------------

    def step_waits(self) -> list[float]:
        """Per step of the current window, the seconds its batch was waited for: its
        ``data_wait``, plus the epoch's start-up for the first step after it.

        What :func:`~pipeline.collective.straggler.slowest_waits` takes from every rank to
        give back, step by step, the longest wait of any rank (``peer_waits`` of
        :meth:`epoch_summary`).
        """
        if not self.enabled:
            return []
        self._flush()
        return [w + lead for w, lead in zip(self._phases["data_wait"], self._leads, strict=True)]

    def epoch_summary(self, *, reset: bool = True, epoch: int | None = None,
                      peer_waits: Sequence[float] | None = None) -> dict[str, Any]:
        """Close the window: the step view (sums, p50 and p99 per phase, steps, samples, step
        wall) and the training view (``training``: every second of the window by phase).

        ``epoch`` labels the window. ``peer_waits``, when given, is per step the longest wait
        of any rank (see :meth:`step_waits`): in synchronous data parallelism a rank whose peer
        is still waiting for its batch waits for it inside the all-reduce, so on each step
        ``min(comm_exposed, peer wait − own wait)`` of this rank's exposed all-reduce is charged
        to input (``training.input_comm_s``) or, for the step after the start-up, to start-up
        (``training.startup_comm_s``). ``reset=False`` reads without closing (the window and
        an open phase continue).
        """
        self._flush()
        outside = dict(self._outside)
        wall = 0.0
        now = None
        if self._window_start is not None:
            now = self._mark()
            if self._step.spans or self._step.added:
                partial = self._partial(self._step, trace=reset)
                for phase, seconds in partial.items():
                    outside[phase] += seconds
                if reset:
                    self._outside = dict(outside)
                    self._release_step(self._step)
                    self._step = _Step()
            if self._open is not None:
                name, start, _ = self._open
                outside[name] += max(0.0, self._clock.seconds(start, now))
            wall = max(0.0, self._clock.seconds(self._window_start, now))
        input_comm = startup_comm = 0.0
        if peer_waits is not None:
            comm, waits = self._phases["comm_exposed"], self.step_waits()
            for i in range(min(len(waits), len(peer_waits))):
                caused = min(comm[i], max(0.0, float(peer_waits[i]) - waits[i]))
                if self._leads[i] > 0:
                    startup_comm += caused
                else:
                    input_comm += caused
        totals = {p: sum(self._phases[p]) + outside.get(p, 0.0) for p in PHASES}
        totals.update({p: outside[p] for p in OUT_OF_STEP_PHASES})
        training = training_block(wall_s=wall, phases=totals, input_comm_s=input_comm,
                                  startup_comm_s=startup_comm, epoch=epoch)
        summary = summarise(rank=self.rank, walls=self._walls, phases=self._phases,
                            samples=self._samples, training=training)
        if epoch is not None:
            summary["epoch"] = epoch
        if reset:
            self._run_steps += summary["steps"]
            self._run_work += summary["wall_s"] - summary["phases"]["comm_exposed"]["sum"]
            self._walls = array("d")
            self._phases = {p: array("d") for p in PHASES}
            self._leads = array("d")
            self._outside = dict.fromkeys(self._outside, 0.0)
            self._samples = 0
            self._window += 1
            if now is not None:
                self._window_start = now
                if self._open is not None:  # the open phase goes on in the next window
                    self._open[1] = now
            if self._clock is not None and self._step.start is not None and not self._step.spans:
                # The next step's wall starts at its first span: time until then is untracked.
                self._clock.release(self._step.start)
                self._step.start = None
        return summary

    def work_per_step(self) -> float | None:
        """Mean seconds of work per step over the closed windows of the run: step wall minus
        exposed all-reduce (waiting for peers). What the straggler rule compares across ranks
        (:func:`pipeline.profile.detectors.straggler.straggler_rule`); None before any step."""
        return self._run_work / self._run_steps if self._run_steps else None

    def trace_events(self) -> list[dict[str, Any]]:
        """Chrome trace ``X`` events of the last ``trace_steps`` resolved steps of this rank,
        and the out-of-step phases from the window of the oldest of them on.

        ``pid`` is the rank, ``tid`` 0 the whole step and 1.. one track per phase in
        :data:`~pipeline.profile._summary.TRACKS` order; ``ts``/``dur`` in microseconds of Unix
        time.
        """
        self._flush()
        events: list[dict[str, Any]] = []
        for index, _, t0, wall, spans in self._trace:
            events.append({"name": f"step {index}", "ph": "X", "pid": self.rank, "tid": 0,
                           "ts": t0 * 1e6, "dur": wall * 1e6, "cat": "step",
                           "args": {"step": index}})
            for phase, ts, dur in spans:
                events.append({"name": phase, "ph": "X", "pid": self.rank, "tid": _TRACK[phase],
                               "ts": ts * 1e6, "dur": dur * 1e6, "cat": "phase",
                               "args": {"step": index}})
        first_window = self._trace[0][1] if self._trace else 0
        for phase, window, ts, dur in self._phase_trace:
            if window >= first_window:
                events.append({"name": phase, "ph": "X", "pid": self.rank, "tid": _TRACK[phase],
                               "ts": ts * 1e6, "dur": dur * 1e6, "cat": "epoch",
                               "args": {"window": window}})
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

    def _open_window(self) -> None:
        # Its own mark: step marks go back to the clock's pool once resolved.
        if self._window_start is None:
            self._window_start = (self._mark or self._bind_clock())()

    def _begin_step(self) -> None:
        # Once per step at most (only when the step has no start yet): off the hot path.
        if self._open is not None:
            raise ValueError(f"a step span or step_done inside profile phase "
                             f"{self._open[0]!r}: out-of-step phases hold no steps")
        self._open_window()

    def _enter_phase(self, phase: str) -> None:
        mark = self._mark or self._bind_clock()
        if self._open is not None:
            raise ValueError(f"profile phase {phase!r} entered inside {self._open[0]!r}; "
                             f"out-of-step phases do not nest")
        self._open_window()
        # Pending steps first: the current step's start is the last one's end mark.
        self._flush()
        step = self._step
        if step.spans or step.added:  # the epoch's last data_wait, which found no batch
            for name, seconds in self._partial(step).items():
                self._outside[name] += seconds
        self._release_step(step)
        self._step = _Step()
        if self._push is not None:
            self._push(phase)
        start = mark()
        # [phase, where this window's share starts, where the phase started (timeline)]
        self._open = [phase, start, start]

    def _exit_phase(self, phase: str) -> None:
        end = self._mark()
        if self._pop is not None:
            self._pop()
        name, start, began = self._open
        assert name == phase, (name, phase)
        self._open = None
        seconds = max(0.0, self._clock.seconds(start, end))
        self._outside[phase] += seconds
        unix = self._clock.unix(began)
        self._phase_trace.append((phase, self._window, unix, self._clock.unix(end) - unix))
        # The next step starts here; its own mark, as step marks are recycled.
        self._step = _Step(start=self._mark(), lead=seconds if phase == "startup" else 0.0)

    def _release_step(self, step: _Step) -> None:
        if self._clock is not None:
            marks = [m for _, a, b in step.spans for m in (a, b)]
            if step.start is not None:
                marks.append(step.start)
            self._clock.release(*marks)

    def _partial(self, step: _Step, *, trace: bool = True) -> dict[str, float]:
        """Seconds by phase of a step that never reached ``step_done``: from its start to the
        end of its last span (what follows is outside any step: untracked)."""
        clock = self._clock
        end = step.spans[-1][2] if step.spans else step.start
        wall = max(0.0, clock.seconds(step.start, end)) if step.start is not None else 0.0
        seconds = dict.fromkeys(MEASURED_PHASES, 0.0)
        for phase, a, b in step.spans:
            seconds[phase] += max(0.0, clock.seconds(a, b))
            if trace:
                t0 = clock.unix(a)
                self._phase_trace.append((phase, self._window, t0, clock.unix(b) - t0))
        for phase, dur, within in step.added:
            if within is not None:
                dur = min(dur, seconds[within])
                seconds[within] -= dur
            seconds[phase] += dur
        seconds["other"] = max(0.0, wall - sum(seconds.values()))
        return seconds

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
        self._leads.append(step.lead)
        self._samples += step.samples
        if self._trace.maxlen:
            t0 = clock.unix(step.start)
            self._trace.append((step.index, self._window, t0, wall,
                                [(p, t0 + s, d) for p, s, d in placed if d > 0]))
        # Each step owns its start and span marks; its end mark is the next step's start.
        clock.release(step.start, *(m for _, a, b in step.spans for m in (a, b)))
