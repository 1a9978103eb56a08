"""One epoch on one rank: the training pass, every step in profiled phases, and the validation
pass, whose task counts are summed over the ranks (Train worker; it reaches the driver only
through the run inbox handle it is given).

The training step, with the parts a :class:`~pipeline.train.task.Task` supplies marked::

    batch = next(feeder)                      # data_wait (h2d carved out), ids kept
    x = augment(batch)                        # forward span: data.augment on the device
    loss = task.loss(ddp, batch)              #   (under autocast with train.precision)  ← task
    backward(loss / grad_accum_steps)         # backward span (the micro-step under DDP's
                                              #   no_sync unless it ends a group)
    clip; optimizer.step(); scheduler.step()  # optimizer span, on group ends ← task's optimizer

Everything but ``task.loss`` and the optimizer and schedule the task configured is the loop's,
so spans and the ids trained stay right whatever the task.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
import torch.distributed as dist

from pipeline.data.augment import augment
from pipeline.messages import EpochProgress, RankWait, send
from pipeline.profile import StepProfiler
from pipeline.train.step import Stepper
from pipeline.train.task import Task, task_name
from pipeline.transfer import DeviceFeeder

if TYPE_CHECKING:
    from pipeline.train.loop import WorkerSpec

PROGRESS_EVERY_S = 1.0


def train_epoch(feeder: DeviceFeeder, stepper: Stepper, prof: StepProfiler, gauges: Any,
                spec: WorkerSpec, epoch: int, device: torch.device,
                on_step: Callable[[int, list], None] | None = None,
                ) -> tuple[int, int, float, float, np.ndarray]:
    """One pass over the shard; every step is split into profiled phases.

    ``h2d`` is the copy time the feeder spent on this step's batch, counted only up to the time
    the step actually waited for it (``data_wait``): copies hidden behind compute cost nothing.
    ``on_step(steps, ids)`` runs after every optimizer step (mid-epoch checkpoints).
    ``gauges`` is a :class:`TrainMetrics`, or None (tests). Returns samples, batches, the summed
    loss, the first batch's wait and the ids trained, in order.
    """
    task = stepper.task
    augment_config, seed = spec.config.data.augment, spec.config.data.seed
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    samples = steps = 0
    loss_sum = torch.zeros((), device=device)  # summed on device: no sync per step
    last_push = last_pulse = last_check = time.perf_counter()
    pulse = spec.config.data.ours  # each rank's wait, for the pool controller
    pulse_wait = pulse_step = 0.0
    pulse_steps = 0
    copy_s = 0.0
    moved = 0
    ids = []  # device tensors; one copy to the host at the end of the epoch, not one per step
    batches = iter(feeder)

    # The first batch of an epoch waits for Ray Data to start (actors, first blocks): the
    # profile's `startup` phase, also reported as first_batch_s.
    step_start = time.perf_counter()
    with prof.phase("startup"):
        batch = next(batches, None)
    first_batch_s = waited = time.perf_counter() - step_start
    while batch is not None:
        stats = feeder.stats
        if steps:
            prof.add("h2d", min(stats.copy_s - copy_s, waited), within="data_wait")
        copy_s = stats.copy_s
        batch = {**batch, spec.field: layout(batch[spec.field])}
        ids.append(batch["id"])
        size = task.batch_size(batch)
        steps += 1
        last = stepper.is_last(steps)  # ends an accumulation group: all-reduce and step
        with stepper.sync(last):  # DDP decides in the forward whether the backward syncs
            with prof.span("forward"):  # augmentation is device work of the step: counted here
                if augment_config.enabled:
                    batch[spec.field] = augment(batch[spec.field], batch["id"], seed=seed,
                                                epoch=epoch, config=augment_config)
                with stepper.autocast():
                    loss = task.loss(stepper.ddp, batch)
            with prof.span("backward"):
                stepper.backward(loss)
        if last:
            with prof.span("optimizer"):
                stepper.step()
        prof.step_done(samples=size)
        now = time.perf_counter()
        step_s = now - step_start
        if gauges is not None:
            gauges.step(samples=size, step_s=step_s, wait_s=waited, h2d_bytes=stats.bytes - moved)
        step_start, moved = now, stats.bytes
        samples += size
        loss_sum += loss.detach().float()
        if on_step is not None and last:
            on_step(steps, ids)
        if pulse and steps > 1:  # the first batch waits for the pipeline's start, not its pace
            pulse_wait, pulse_step, pulse_steps = (pulse_wait + waited,
                                                   pulse_step + step_s, pulse_steps + 1)
            if now - last_pulse >= PROGRESS_EVERY_S:
                send(spec.reporter, RankWait(rank=rank, wait_s=pulse_wait, step_s=pulse_step,
                                             steps=pulse_steps, t=time.time()))
                pulse_wait = pulse_step = 0.0
                pulse_steps, last_pulse = 0, now
        if now - last_check >= PROGRESS_EVERY_S:  # a diverged run stops within a second
            stepper.check_finite(epoch)
            last_check = now
        if rank == 0 and now - last_push >= PROGRESS_EVERY_S:
            send(spec.reporter, EpochProgress(epoch=epoch, samples=samples * world))
            last_push = now
        waited = time.perf_counter()
        with prof.span("data_wait"):
            batch = next(batches, None)
        waited = time.perf_counter() - waited
    if pulse:  # the pass is over: the controller judges the epoch while validation runs
        send(spec.reporter, RankWait(rank=rank, wait_s=pulse_wait, step_s=pulse_step,
                                     steps=pulse_steps, t=time.time(), epoch_done=epoch + 1))
    stepper.check_finite(epoch)  # before validation, the report and the epoch's checkpoint
    seen = torch.cat(ids).cpu().numpy() if ids else np.empty(0, np.int64)
    return samples, steps, float(loss_sum), first_batch_s, seen


def evaluate(stepper: Stepper, feeder: Iterable[dict[str, torch.Tensor]],
             field: str) -> dict[str, torch.Tensor]:
    """The task's validation counts over this rank's batches, summed on the device (no sync
    per batch); :func:`all_counts` sums them over the ranks. ``field`` is the input's key."""
    sums: dict[str, torch.Tensor] = {}
    model = stepper.model
    model.eval()
    with torch.no_grad():
        for batch in feeder:
            batch = {**batch, field: layout(batch[field])}
            with stepper.autocast():
                counts = stepper.task.eval_counts(model, batch)
            for key, value in counts.items():
                sums[key] = sums[key] + value if key in sums else value
    model.train()
    return sums


def all_counts(sums: dict[str, torch.Tensor], device: torch.device,
               world: int) -> dict[str, float]:
    """The task's validation counts summed over the ranks (a collective). The ranks first agree
    on the names: one with no validation batch has none of them."""
    names = sorted(sums)
    if world > 1:
        every: list[Any] = [None] * world
        dist.all_gather_object(every, names)
        names = sorted(set().union(*every))
    values = [_scalar(n, sums[n], device) if n in sums
              else torch.zeros((), dtype=torch.float64, device=device) for n in names]
    if not values:
        return {}
    t = torch.stack(values)
    if world > 1:
        dist.all_reduce(t)
    return dict(zip(names, t.tolist(), strict=True))


def _scalar(name: str, value: Any, device: torch.device) -> torch.Tensor:
    t = torch.as_tensor(value, device=device).detach().to(torch.float64)
    if t.numel() != 1:
        raise ValueError(f"validation count {name!r} has shape {tuple(t.shape)}: eval_counts "
                         f"must return one number per name, e.g. (pred == y).sum()")
    return t.reshape(())


def task_metrics(task: Task, totals: dict[str, float],
                 reserved: Iterable[str]) -> dict[str, float]:
    """The task's validation metrics; a name the loop reports itself (``reserved``) is refused."""
    out = dict(task.eval_metrics(totals))
    clash = sorted(set(out) & set(reserved))
    if clash:
        raise ValueError(f"{task_name(task)}.eval_metrics returned {', '.join(clash)}, which the "
                         f"loop reports itself; name the task's metrics val_*")
    return out


def layout(x: torch.Tensor) -> torch.Tensor:
    """Image batches in channels-last memory: oneDNN's (and cuDNN's tensor-core) convolutions
    run faster on it (measured here: the bench CNN's step at 128² took 0.42-0.45 s instead of
    0.58-0.66 s on one CPU thread), which is what a plain loop gets by permuting NHWC arrays."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
