"""The span sequence ``pipeline/train/loop.py`` produces, driven by a virtual clock.

The fixture has the shape production has, not the shape the profiler expects: per epoch,
``startup`` (the first fetch) → [forward, backward (exposed all-reduce carved out of it),
optimizer, step_done, data_wait (h2d carved out of it)]* where the epoch's last ``data_wait``
finds no batch and never reaches ``step_done`` → a little untracked time (ids to the host, the
feeder closing) → ``validation`` → ``report`` (the epoch summary is taken in the middle of it)
→ ``checkpoint``; after the last epoch the tail summary. Every duration is exact, so the tests
can assert where each second went without sleeping.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pytest

from pipeline.profile import StepProfiler


class VirtualClock:
    """A host clock whose time only moves when the test says so."""

    nvtx = False

    def __init__(self) -> None:
        self.now = 0.0

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def mark(self) -> float:
        return self.now

    def done(self, mark: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def unix(self, mark: float) -> float:
        return 1.8e9 + mark

    def release(self, *marks: float) -> None:
        pass

    def push(self, name: str) -> None:
        pass

    def pop(self) -> None:
        pass


@dataclass
class Epoch:
    """One epoch's durations in seconds (per step where it says so)."""

    startup: float = 1.0
    steps: int = 5
    data_wait: float = 0.01        # waiting for each batch after the first
    h2d: float = 0.0               # carved out of that wait
    forward: float = 0.02
    backward: float = 0.03         # not counting the exposed all-reduce
    comm: float = 0.0              # exposed all-reduce, inside backward
    optimizer: float = 0.005
    other: float = 0.0             # between step_done and the next fetch (progress push)
    last_wait: float = 0.05        # the final fetch, which finds no batch
    tail: float = 0.002            # untracked: ids to the host, feeder closes
    validation: float = 0.2
    report: float = 0.02           # half before the epoch summary, half after it
    checkpoint: float = 0.1
    between: float = 0.001         # untracked: the next epoch's feeder is built
    waits: Sequence[float] | None = None   # per step (index 0 unused: startup fetched it)
    comms: Sequence[float] | None = None   # per step

    def wait(self, i: int) -> float:
        return self.waits[i] if self.waits is not None else self.data_wait

    def comm_at(self, i: int) -> float:
        return self.comms[i] if self.comms is not None else self.comm

    def step_waits(self) -> list[float]:
        """What ``StepProfiler.step_waits`` must report: start-up for the first step, then
        each data_wait (less the h2d carved out of it)."""
        return [self.startup if i == 0 else self.wait(i) - self.h2d for i in range(self.steps)]

    def seconds(self) -> float:
        """The epoch's whole wall."""
        steps = sum(self.forward + self.backward + self.comm_at(i) + self.optimizer + self.other
                    + (self.wait(i) if i else 0.0) for i in range(self.steps))
        return (self.startup + steps + self.last_wait + self.tail + self.validation
                + self.report + self.checkpoint + self.between)


def run_epoch(prof: StepProfiler, clock: VirtualClock, plan: Epoch, *, epoch: int,
              peer_waits: Sequence[float] | None = None) -> dict:
    """One epoch of the real loop; returns the summary sent during ``report``."""
    go = clock.advance
    with prof.phase("startup"):
        go(plan.startup)
    for i in range(plan.steps):
        if i and plan.h2d:
            prof.add("h2d", plan.h2d, within="data_wait")
        with prof.span("forward"):
            go(plan.forward)
        with prof.span("backward"):
            go(plan.backward + plan.comm_at(i))
        if plan.comm_at(i):
            prof.add("comm_exposed", plan.comm_at(i), within="backward")  # as the comm timer
        with prof.span("optimizer"):
            go(plan.optimizer)
        prof.step_done(samples=32)
        go(plan.other)
        with prof.span("data_wait"):
            go(plan.wait(i + 1) if i + 1 < plan.steps else plan.last_wait)
    go(plan.tail)
    with prof.phase("validation"):
        go(plan.validation)
    with prof.phase("report"):
        go(plan.report / 2)
        assert prof.step_waits() == pytest.approx(plan.step_waits())
        summary = prof.epoch_summary(epoch=epoch, peer_waits=peer_waits)
        go(plan.report / 2)
    with prof.phase("checkpoint"):
        go(plan.checkpoint)
    go(plan.between)
    return summary


def run(plans: Sequence[Epoch], *, rank: int = 0, peer_waits: Sequence | None = None,
        trace_steps: int = 200) -> tuple[list[dict], StepProfiler, VirtualClock]:
    """Every epoch of ``plans`` and the tail summary: ``(windows, profiler, clock)``.
    ``peer_waits[e]`` is the slowest rank's waits in epoch ``e`` (None: one rank)."""
    clock = VirtualClock()
    prof = StepProfiler(rank=rank, device="cpu", clock=clock, trace_steps=trace_steps)
    windows = [run_epoch(prof, clock, plan, epoch=e + 1,
                         peer_waits=peer_waits[e] if peer_waits else None)
               for e, plan in enumerate(plans)]
    windows.append(prof.epoch_summary(epoch=len(plans)))  # the tail: last report, checkpoint
    return windows, prof, clock
