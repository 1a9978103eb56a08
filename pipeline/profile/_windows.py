"""Reading a :class:`~pipeline.profile.spans.StepProfiler`: windows, summaries, trace events.

``epoch_summary`` closes a window (every second since the previous one, by phase; see
:mod:`pipeline.profile.spans` for the two accounts), ``step_waits`` and ``work_per_step`` feed
the straggler rules, ``trace_events`` the timeline. Runs in the Train worker.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from pipeline.profile._span_records import _Step
from pipeline.profile._summary import (
    OUT_OF_STEP_PHASES,
    PHASES,
    TRACKS,
    summarise,
    training_block,
)

_TRACK = {name: i for i, name in enumerate(TRACKS)}  # tid 0 is the whole step


class _WindowReader:
    """Mixin of :class:`~pipeline.profile.spans.StepProfiler`: what it reports, on the state
    that ``StepProfiler.__init__`` sets up; resolving marks is
    :class:`~pipeline.profile._step_resolve._StepResolver`'s.
    """

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
