"""What watches the training steps, each an observer of the loop's three events (Train worker;
no Ray: what leaves the worker goes through the ``push`` it is given).

The loop (:func:`pipeline.train.loop.train_pass`) calls, for every batch::

    on_batch(batch, fetch)   # the batch is on the device; how long the step waited for it
    on_step(step)            # forward, backward and (ending a group) the optimizer are done
    ...
    on_epoch_end(epoch)      # the pass is over (before validation)

Observers run in the order given, so the profile's ``step_done`` (:class:`Spans`) closes a
step before anything after it spends time on progress messages. They take their time from the
clock they are given: tests drive them, and the loop, on a virtual one.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from pipeline.messages import EpochProgress, Message, RankWait

#: seconds between progress messages, pool pulses and divergence checks
EVERY_S = 1.0


@dataclass(frozen=True)
class Fetch:
    """How the step got its batch."""

    index: int      # the step it feeds, from 1 within the epoch
    waited: float   # seconds the loop waited for it (the first: the pipeline's start-up)
    copy_s: float   # host-to-device copy seconds the feeder spent since the previous batch
    bytes: int      # bytes the feeder moved since the previous batch


@dataclass(frozen=True)
class Step:
    """One finished training step."""

    epoch: int
    index: int               # from 1 within the epoch
    samples: int
    loss: torch.Tensor       # detached, on the device (reading it syncs)
    stepped: bool            # it ended an accumulation group: the optimizer stepped
    waited: float            # seconds it waited for its batch
    seconds: float           # its wall, from the previous step's end (the wait included)
    now: float               # the observers' clock at its end
    ids: list[torch.Tensor]  # the ids this epoch trained so far, one tensor per batch


class Observer:
    """The protocol, with nothing done on any event; subclasses override what they watch."""

    def on_batch(self, batch: dict[str, torch.Tensor], fetch: Fetch) -> None:
        pass

    def on_step(self, step: Step) -> None:
        pass

    def on_epoch_end(self, epoch: int) -> None:
        pass


class Observers(Observer):
    """Several observers as one, called in order."""

    def __init__(self, *observers: Observer | None) -> None:
        self.all = [o for o in observers if o is not None]

    def on_batch(self, batch: dict[str, torch.Tensor], fetch: Fetch) -> None:
        for o in self.all:
            o.on_batch(batch, fetch)

    def on_step(self, step: Step) -> None:
        for o in self.all:
            o.on_step(step)

    def on_epoch_end(self, epoch: int) -> None:
        for o in self.all:
            o.on_epoch_end(epoch)


class Spans(Observer):
    """The step profile: the fetch's spans (``startup`` for an epoch's first batch, which waits
    for Ray Data to start; ``data_wait`` after), the feeder's copy carved out of the wait it
    happened in (copies hidden behind compute cost nothing), and the step's end. The forward,
    backward and optimizer spans are the stepper's (``Stepper.span``)."""

    def __init__(self, prof: Any) -> None:
        self.prof = prof

    def fetch(self, batches: Iterator[Any], clock: Callable[[], float]
              ) -> Iterator[tuple[Any, float]]:
        """Each batch of ``batches`` with the seconds waited for it."""
        span = self.prof.phase("startup")
        while True:
            start = clock()
            with span:
                batch = next(batches, None)
            if batch is None:
                return
            yield batch, clock() - start
            span = self.prof.span("data_wait")

    def on_batch(self, batch: dict[str, torch.Tensor], fetch: Fetch) -> None:
        if fetch.index > 1:
            self.prof.add("h2d", min(fetch.copy_s, fetch.waited), within="data_wait")

    def on_step(self, step: Step) -> None:
        self.prof.step_done(samples=step.samples)


class Gauges(Observer):
    """The Prometheus gauges of :class:`~pipeline.profile.metrics.TrainMetrics`."""

    def __init__(self, metrics: Any) -> None:
        self.metrics = metrics
        self._bytes = 0

    def on_batch(self, batch: dict[str, torch.Tensor], fetch: Fetch) -> None:
        self._bytes = fetch.bytes

    def on_step(self, step: Step) -> None:
        self.metrics.step(samples=step.samples, step_s=step.seconds, wait_s=step.waited,
                          h2d_bytes=self._bytes)

    def on_epoch_end(self, epoch: int) -> None:
        self.metrics.flush()


class Progress(Observer):
    """Rank 0's samples so far (times the ranks: every rank trains about as many), about once
    a second, for the driver's progress bar."""

    def __init__(self, push: Callable[[Message], Any], world: int) -> None:
        self.push, self.world = push, world
        self._samples, self._last = 0, None

    def on_step(self, step: Step) -> None:
        if step.index == 1:
            self._samples, self._last = 0, step.now
        self._samples += step.samples
        if step.now - self._last >= EVERY_S:
            self.push(EpochProgress(epoch=step.epoch, samples=self._samples * self.world))
            self._last = step.now


class PoolPulse(Observer):
    """This rank's wait for its batches and the samples it trained, about once a second and at
    the end of each pass, for the decode pool's controller (``data.autoscale``). The first step
    of an epoch waits for the pipeline's start, not its pace: it is left out."""

    def __init__(self, push: Callable[[Message], Any], rank: int,
                 unix: Callable[[], float] = time.time) -> None:
        self.push, self.rank, self.unix = push, rank, unix
        self._reset(None)

    def _reset(self, now: float | None) -> None:
        self._wait = self._busy = 0.0
        self._steps = self._samples = 0
        self._last = now

    def on_step(self, step: Step) -> None:
        if step.index == 1:
            self._reset(step.now)
            return
        self._wait += step.waited
        self._busy += step.seconds
        self._steps += 1
        self._samples += step.samples
        if step.now - self._last >= EVERY_S:
            self._send()
            self._reset(step.now)

    def on_epoch_end(self, epoch: int) -> None:
        # the pass is over: the controller judges the epoch while validation runs
        self._send(epoch_done=epoch + 1)
        self._reset(None)

    def _send(self, epoch_done: int | None = None) -> None:
        self.push(RankWait(rank=self.rank, wait_s=self._wait, step_s=self._busy,
                           steps=self._steps, t=self.unix(), epoch_done=epoch_done,
                           samples=self._samples))


class DivergenceCheck(Observer):
    """Stop a diverged run within about a second, and always before validation, the epoch's
    report and its checkpoint (:meth:`~pipeline.train.step.Stepper.check_finite`, one host
    sync each)."""

    def __init__(self, stepper: Any) -> None:
        self.stepper = stepper
        self._last: float | None = None

    def on_step(self, step: Step) -> None:
        if self._last is None:
            self._last = step.now
        elif step.now - self._last >= EVERY_S:
            self.stepper.check_finite(step.epoch)
            self._last = step.now

    def on_epoch_end(self, epoch: int) -> None:
        self.stepper.check_finite(epoch)
        self._last = None


class MidEpochCheckpoints(Observer):
    """``train.checkpoint_every``: a checkpoint every that many optimizer steps, holding every
    rank's ids trained so far this epoch, so a restarted worker group resumes mid-epoch
    (:mod:`pipeline.train.checkpoint`). Every rank must be at the same step: after a resume the
    ranks' step counts differ (each skips different ids), so that epoch saves at its end only
    (``paused``)."""

    def __init__(self, every: int, stepper: Any, prof: Any, save: Callable[..., None],
                 gather: Callable[[Any], Any]) -> None:
        self.every, self.stepper, self.prof = every, stepper, prof
        self.save, self.gather = save, gather
        self.paused = False

    def on_step(self, step: Step) -> None:
        if (self.paused or not self.every or not step.stepped
                or (step.index // self.stepper.accum) % self.every):
            return
        self.stepper.check_finite(step.epoch)  # never a checkpoint of diverged weights
        with self.prof.phase("checkpoint"):
            mine = torch.cat(step.ids).cpu().numpy()
            self.save(epoch=step.epoch, step=step.index, consumed=self.gather(mine),
                      metrics={"epoch": step.epoch + 1, "step": step.index})
