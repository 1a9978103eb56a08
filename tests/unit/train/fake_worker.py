"""The real worker loop (:class:`pipeline.train.loop.Worker`) driven by fakes on a virtual clock.

Every part Ray would supply is a fake that spends the time an :class:`Epoch` plan gives it: the
feeder's fetches (``startup`` for the first batch, ``data_wait`` after, the copies it carves
out, ``last_wait`` for the fetch that finds no batch), the task's forward, its backward (the
exposed all-reduce reported through the profiler's comm timer, as DDP's hook does), the
optimizer, the validation pass, the report's collectives and message, the checkpoint. The span
sequence is therefore the one production produces, not a copy of it, and every duration is exact
so tests can assert where each second went without sleeping.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, replace

import pytest
import torch
from torch import nn

from pipeline.messages import EpochDone, ProfileTail
from pipeline.profile import StepProfiler
from pipeline.train.loop import Worker, _build
from pipeline.train.observers import Observer, Step
from pipeline.train.ranks import Ranks
from pipeline.train.task import Task
from pipeline.transfer import TransferStats
from tests.unit.train.loop_fixtures import spec

CPU = torch.device("cpu")
BATCH = 32


class VirtualClock:
    """A host clock whose time only moves when the test says so."""

    nvtx = False

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def mark(self) -> float:
        return self.now

    def done(self, mark: float) -> bool:
        return True

    def seconds(self, start: float, end: float) -> float:
        return end - start

    def unix(self, mark: float | None = None) -> float:
        return 1.8e9 + (self.now if mark is None else mark)

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
    h2d: float = 0.0               # the feeder's copy, carved out of that wait
    forward: float = 0.02
    backward: float = 0.03         # not counting the exposed all-reduce
    comm: float = 0.0              # exposed all-reduce, inside backward
    optimizer: float = 0.005
    other: float = 0.0             # after the step's end, before the next fetch
    last_wait: float = 0.05        # the final fetch, which finds no batch
    tail: float = 0.002            # untracked: the feeder closes
    validation: float = 0.2
    report: float = 0.02           # half before the epoch summary, half after it
    checkpoint: float = 0.1
    between: float = 0.001         # untracked, with tail
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


class Script:
    """Where the run is: the plan of the current epoch and the step being fetched."""

    def __init__(self, plans: Sequence[Epoch], clock: VirtualClock) -> None:
        self.plans, self.clock = plans, clock
        self.epoch = self.index = 0
        self.prof: StepProfiler | None = None

    @property
    def plan(self) -> Epoch:
        return self.plans[self.epoch]


class FakeFeeder:
    """A pass's device feeder: ``plan.steps`` batches of ``BATCH`` ids, each fetch taking the
    plan's wait, ``stats`` kept as :class:`~pipeline.transfer.DeviceFeeder` keeps them."""

    def __init__(self, script: Script, epoch: int) -> None:
        self.script, self.epoch = script, epoch
        self.stats = TransferStats()

    def __iter__(self):
        s, plan, go = self.script, self.script.plan, self.script.clock.advance
        for i in range(plan.steps):
            s.index = i
            go(plan.startup if i == 0 else plan.wait(i))
            if i and plan.h2d:
                self.stats = replace(self.stats, copy_s=self.stats.copy_s + plan.h2d)
            first = (self.epoch * plan.steps + i) * BATCH
            yield {"features": torch.zeros(BATCH, 4), "label": torch.zeros(BATCH, dtype=torch.long),
                   "id": torch.arange(first, first + BATCH)}
        go(plan.last_wait)


class FakeChain:
    """A feed chain (:class:`pipeline.train.chain.FeedChain`) that streams every epoch."""

    replays = False
    group = None

    def __init__(self, script: Script, *, train: bool = True) -> None:
        self.script, self.train = script, train

    @contextlib.contextmanager
    def epoch(self, epoch: int, skip=None):
        self.script.epoch = epoch
        plan, go = self.script.plan, self.script.clock.advance
        if not self.train:
            go(plan.validation)
            yield []
            return
        yield FakeFeeder(self.script, epoch)
        go(plan.tail + plan.between)

    def status(self) -> dict:
        return {"mode": "off"}


class _Backward(torch.autograd.Function):
    """Identity whose backward spends the plan's backward and exposed all-reduce: the comm timer
    sees the last bucket ready, then done ``comm`` later, as DDP's timed hook reports them."""

    @staticmethod
    def forward(ctx, x, script):
        ctx.script = script
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        s = ctx.script
        s.clock.advance(s.plan.backward)
        comm = s.plan.comm_at(s.index)
        if comm:
            s.prof.comm_timer.on_ready()
            s.clock.advance(comm)
            s.prof.comm_timer.on_done()
        return grad, None


class ClockedSGD(torch.optim.SGD):
    def __init__(self, params, script: Script) -> None:
        super().__init__(params, lr=0.0)
        self.script = script

    def step(self, closure=None):
        self.script.clock.advance(self.script.plan.optimizer)
        return super().step(closure)


class ClockedTask(Task):
    """A task whose forward, backward and optimizer spend the plan's time."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def build_model(self, ctx):
        return nn.Linear(4, 3)

    def configure_optimizer(self, model, ctx):
        return ClockedSGD(model.parameters(), self.script)

    def loss(self, model, batch):
        self.script.clock.advance(self.script.plan.forward)
        return _Backward.apply(model(batch["features"]).sum() * 0.0, self.script)

    def eval_metrics(self, totals):
        return {}


class FakeRanks(Ranks):
    """One rank's view of ``world`` ranks (no process group: sums are its own). The report's
    collectives before the epoch summary take half the plan's ``report``; ``peer_waits[e]`` is
    the slowest rank's waits in epoch ``e``."""

    def __init__(self, script: Script, world: int, peer_waits: Sequence | None) -> None:
        super().__init__(CPU, world)
        self.script, self.peer_waits = script, peer_waits

    def slowest_waits(self, waits):
        s = self.script
        assert waits == pytest.approx(s.plan.step_waits())
        s.clock.advance(s.plan.report / 2)
        return self.peer_waits[s.epoch] if self.peer_waits else None


class Other(Observer):
    """Time spent after the step's end (a progress message), before the next fetch."""

    def __init__(self, script: Script) -> None:
        self.script = script

    def on_step(self, step: Step) -> None:
        self.script.clock.advance(self.script.plan.other)


class Driver:
    """What the worker pushed, in order; an ``EpochDone`` takes the report's second half."""

    def __init__(self, script: Script) -> None:
        self.script, self.messages = script, []

    def __call__(self, message) -> None:
        self.messages.append(message)
        if isinstance(message, EpochDone):
            self.script.clock.advance(self.script.plan.report / 2)

    def of(self, kind: type) -> list:
        return [m for m in self.messages if isinstance(m, kind)]


def worker(plans: Sequence[Epoch], *, rank: int = 0, peer_waits: Sequence | None = None,
           trace_steps: int = 200, clock: VirtualClock | None = None,
           prof: StepProfiler | None = None, **train) -> tuple[Worker, Driver, Script]:
    """The real :class:`Worker` over ``plans`` with fakes for every Ray-specific part."""
    clock = clock or VirtualClock()
    script = Script(plans, clock)
    script.prof = prof or StepProfiler(rank=rank, device="cpu", clock=clock,
                                       trace_steps=trace_steps)
    worker_spec = spec(ClockedTask(script), epochs=len(plans), **train)
    stepper = _build(worker_spec, CPU, 1, script.prof)
    driver = Driver(script)
    saves = []

    def save(**kwargs):
        saves.append(kwargs)
        clock.advance(script.plan.checkpoint)

    w = Worker(spec=worker_spec, stepper=stepper, prof=script.prof, train=FakeChain(script),
               val=FakeChain(script, train=False), caches={},
               ranks=FakeRanks(script, 2 if peer_waits else 1, peer_waits), rank=rank,
               push=driver, save=save, extra=(Other(script),), clock=clock, unix=clock.unix)
    w.saves = saves
    return w, driver, script


def run(plans: Sequence[Epoch], *, rank: int = 0, peer_waits: Sequence | None = None,
        trace_steps: int = 200) -> tuple[list[dict], StepProfiler, VirtualClock]:
    """Every epoch of ``plans`` and the tail summary: ``(windows, profiler, clock)``.
    ``peer_waits[e]`` is the slowest rank's waits in epoch ``e`` (None: one rank)."""
    w, driver, script = worker(plans, rank=rank, peer_waits=peer_waits, trace_steps=trace_steps)
    w.run()
    windows = [m.profile for m in driver.of(EpochDone)] + [m.profile
                                                          for m in driver.of(ProfileTail)]
    return windows, script.prof, script.clock


def run_epoch(prof: StepProfiler, clock: VirtualClock, plan: Epoch, *, epoch: int) -> dict:
    """One epoch (``epoch`` from 1) of the real worker on ``prof``; the summary it sent."""
    w, driver, _ = worker([plan] * epoch, prof=prof, clock=clock)
    w.epoch(epoch - 1)
    return driver.of(EpochDone)[-1].profile
