"""Resolving a :class:`~pipeline.profile.spans.StepProfiler`'s marks into seconds (Train worker).

The profiler's internals: binding the clock, entering and leaving out-of-step phases, and turning
a step's marks into per-phase seconds in the current window (with the carves of ``add`` and the
exposed all-reduce) and into trace events. When and in what batches steps are resolved is told in
:mod:`pipeline.profile.spans`.
"""

from __future__ import annotations

from typing import Any

from pipeline.profile._clock import make_clock
from pipeline.profile._span_records import _Step
from pipeline.profile._summary import MEASURED_PHASES


class _StepResolver:
    """Mixin of :class:`~pipeline.profile.spans.StepProfiler`: its internals, on the state
    that ``StepProfiler.__init__`` sets up."""

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
