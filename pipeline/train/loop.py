"""The per-worker training loop: runs inside each Ray Train worker.

One epoch on one rank reads, top to bottom, as :meth:`Worker.epoch`::

    with train.epoch(e) as feeder:                 # shard → cache → skip → shuffle → device
        for batch in feeder:                       #   (pipeline.train.chain)
            observers.on_batch(batch, fetch)
            loss, stepped = stepper.train_step(batch, i)   # task.loss, backward, optimizer
            observers.on_step(step)                # spans, gauges, progress, pool pulse,
        observers.on_epoch_end(e)                  #   divergence checks, mid-epoch checkpoints
    report (collectives, EpochDone to the driver) → checkpoint → validation (EpochClosed)

The run's :class:`~pipeline.train.task.Task` supplies the model, the optimizer, the loss and
the validation counts; the rest is the loop's (:mod:`pipeline.train.step`: precision,
accumulation, clipping, the schedule). What watches the steps is in
:mod:`pipeline.train.observers`; what the ranks agree on, in :mod:`pipeline.train.ranks`.
Progress, spans and the ids trained go to the driver through the run inbox
(:mod:`pipeline.messages`). Every epoch's training pass ends with a checkpoint, before
validation, so a restarted worker group (or a run stopped during validation) resumes at the
next epoch; ``train.checkpoint_every`` adds mid-epoch ones.

:class:`Worker` takes every Ray-specific part from :func:`train_loop`, which builds them from
Ray Train's context: unit tests drive the same loop with fakes.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from pipeline.collective import (
    classify_link,
    detect_topology,
    measure_collectives,
    straggler_summary,
    wrap_ddp,
)
from pipeline.collective.ranks import apply_rank_plan
from pipeline.data.augment import augment
from pipeline.messages import (
    Diverged,
    EpochClosed,
    EpochDone,
    LinkProbe,
    Message,
    ProfileTail,
    Started,
    send,
)
from pipeline.procfs import process_start
from pipeline.profile import StepProfiler, operator_stats, timed_hook
from pipeline.profile.metrics import TrainMetrics
from pipeline.train import checkpoint
from pipeline.train import context as task_calls
from pipeline.train.cache import (
    CacheDecision,
    SampleCache,
    available_memory,
    cache_dir,
    disk_free,
    rank_cache,
)
from pipeline.train.chain import FeedChain, FeedSpec
from pipeline.train.context import TaskContext
from pipeline.train.evaluate import all_counts, evaluate, layout, task_metrics
from pipeline.train.observers import (
    DivergenceCheck,
    Fetch,
    Gauges,
    MidEpochCheckpoints,
    Observer,
    Observers,
    PoolPulse,
    Progress,
    Spans,
    Step,
)
from pipeline.train.ranks import Ranks
from pipeline.train.reshuffle import global_needs_streaming, group_of
from pipeline.train.spec import WorkerSpec
from pipeline.train.step import Stepper, schedule_steps
from pipeline.train.task import resolve_task, task_name
from pipeline.transfer import TransferStats

logger = logging.getLogger(__name__)
VERDICT_WAIT_S = 5.0  # the driver drains its inbox every 0.5 s: a verdict takes about that


def _device(use_gpu: bool) -> torch.device:
    if use_gpu:
        import ray.train.torch

        return ray.train.torch.get_device()
    return torch.device("cpu")


def _caches(spec: WorkerSpec, ctx: Any, ranks: Ranks) -> dict[str, SampleCache]:
    """This rank's decoded-sample caches (train, val), sized as ``data.cache`` asks. Every rank
    decides from the same numbers (the smallest budget of any), so all replay or none. A
    memory cache lives in shared memory, which the node's trainers share: its budget is also
    bounded by the room there."""
    cfg = spec.config.data
    world, local = ctx.get_world_size(), max(1, ctx.get_local_world_size())
    per_sample = spec.row_bytes or int(np.prod(spec.sample_shape)) * (
        1 if spec.field == "image" and spec.config.transfer.ship_uint8 else 4) + 16
    dirs = {name: (cache_dir(cfg.cache_dir, spec.config.run.name, name, ctx.get_world_rank(),
                             memory=True),
                   cache_dir(cfg.cache_dir, spec.config.run.name, name, ctx.get_world_rank()))
            for name in ("train", "val")}
    memory = available_memory() * cfg.cache_memory_fraction / local
    shm = dirs["train"][0]
    if shm is not None:
        memory = min(memory, disk_free(shm) / (2 * local))
    budget, free = ranks.min([memory, disk_free(dirs["train"][1])])
    caches = {name: rank_cache(cfg.cache_mode, rows=rows, per_sample=per_sample, world=world,
                               budget=budget, free=int(free), memory_dir=dirs[name][0],
                               disk_dir=dirs[name][1],
                               deterministic=spec.config.train.deterministic)
              for name, rows in (("train", spec.num_train), ("val", spec.num_val))}
    streaming = global_needs_streaming(cfg.reshuffle, ranks.gather(socket.gethostname()))
    if streaming and caches["train"].enabled:
        caches["train"] = SampleCache(CacheDecision("off", streaming))
    return caches


def _share(chain: FeedChain, ranks: Ranks) -> None:
    """Once every rank's training cache is complete: swap what each holds and deal the replayed
    epochs over the group ``data.reshuffle`` names (:mod:`pipeline.train.reshuffle`)."""
    shards = ranks.gather(chain.shard_info(socket.gethostname()))
    group = group_of(chain.spec.reshuffle, shards, chain.rank)
    chain.share(group, shards)
    logger.info("cache: %s", group.reason)


def _agree(caches: dict[str, SampleCache], ranks: Ranks) -> None:
    """After a pass: a cache replays only if every rank's is complete (else ranks would mix
    replayed and streamed epochs, and streaming_split waits for every rank)."""
    names = sorted(caches)
    flags = ranks.min([float(caches[n].complete) for n in names])
    for name, flag in zip(names, flags, strict=True):
        if caches[name].complete and not flag:
            caches[name].discard()


def _build(spec: WorkerSpec, device: torch.device, world: int, prof: StepProfiler) -> Stepper:
    """The task's model on the device (DDP-wrapped with several ranks), its optimizer and
    schedule, and how the loop steps them (``train.precision``, accumulation, clipping)."""
    cfg = spec.config
    task = spec.task if spec.task is not None else resolve_task(cfg.train.task)
    ctx = TaskContext(input_shape=tuple(spec.sample_shape), num_classes=spec.num_classes,
                      train=cfg.train,
                      total_steps=schedule_steps(num_train=spec.num_train, world=world,
                                                 batch_size=cfg.train.batch_size,
                                                 accum=cfg.train.grad_accum_steps,
                                                 epochs=cfg.train.epochs))
    model = task_calls.build_model(task, ctx, cfg)
    if not isinstance(model, nn.Module):
        raise TypeError(f"{task_name(task)}.build_model returned {type(model).__name__}, not an "
                        f"nn.Module")
    model = model.to(device)
    timing = ((lambda hook, state: timed_hook(hook, state, prof.comm_timer))
              if prof.enabled else None)
    ddp = (wrap_ddp(model, cfg.collective, device=device, hook_wrapper=timing)
           if dist.is_initialized() and world > 1 else model)
    optimizer = task_calls.configure_optimizer(task, model, ctx, cfg)
    return Stepper(task=task, model=model, ddp=ddp, optimizer=optimizer,
                   scheduler=task_calls.configure_scheduler(task, optimizer, ctx, cfg),
                   device=device, span=prof.span if prof.enabled else None,
                   accum=cfg.train.grad_accum_steps, clip=cfg.train.grad_clip_norm,
                   precision=cfg.train.precision, max_nonfinite=cfg.train.max_nonfinite_steps)


@dataclass(frozen=True)
class Pass:
    """What one rank's training pass over its shard did."""

    samples: int
    steps: int
    loss_sum: float
    first_batch_s: float  # the wait for its first batch (Ray Data's start)
    ids: np.ndarray       # the ids it trained, in order


def train_pass(feeder: Any, stepper: Stepper, spans: Spans, observers: Observer, *,
               epoch: int, field: str, transform: Any = None,
               clock: Callable[[], float] = time.perf_counter) -> Pass:
    """One pass over this rank's shard. ``feeder`` yields device batches and keeps
    :class:`~pipeline.transfer.TransferStats` (``feeder.stats``); the task's loss runs in
    :meth:`Stepper.train_step`; everything else watches (:mod:`pipeline.train.observers`)."""
    samples, ids, first_wait = 0, [], 0.0
    loss_sum = torch.zeros((), device=stepper.device)  # summed on the device: no sync per step
    copied, moved = feeder.stats.copy_s, feeder.stats.bytes
    end = clock()
    for index, (batch, waited) in enumerate(spans.fetch(iter(feeder), clock), start=1):
        stats = feeder.stats
        fetch = Fetch(index, waited, stats.copy_s - copied, stats.bytes - moved)
        copied, moved = stats.copy_s, stats.bytes
        batch = {**batch, field: layout(batch[field])}
        ids.append(batch["id"])
        observers.on_batch(batch, fetch)
        loss, stepped = stepper.train_step(batch, index, transform)
        size = stepper.task.batch_size(batch)
        samples += size
        loss_sum += loss.float()
        now = clock()
        observers.on_step(Step(epoch=epoch, index=index, samples=size, loss=loss,
                               stepped=stepped, waited=waited, seconds=now - end, now=now,
                               ids=ids))
        end, first_wait = now, first_wait if index > 1 else waited
    observers.on_epoch_end(epoch)
    seen = torch.cat(ids).cpu().numpy() if ids else np.empty(0, np.int64)
    return Pass(samples, len(ids), float(loss_sum), first_wait, seen)


def augmenter(spec: WorkerSpec, epoch: int) -> Callable[[dict], dict] | None:
    """``data.augment`` as the step's transform (on the device, in its forward span)."""
    data, field = spec.config.data, spec.field
    if not data.augment.enabled:
        return None
    return lambda batch: {**batch, field: augment(batch[field], batch["id"], seed=data.seed,
                                                  epoch=epoch, config=data.augment)}


@dataclass
class Worker:
    """One rank's epochs, with every Ray-specific part handed in (:func:`train_loop` builds
    them; unit tests drive it with fakes). Each epoch: the training pass, the report the
    driver gets (:class:`~pipeline.messages.EpochDone`), a checkpoint, so a restart resumes at
    the next epoch, then validation (:class:`~pipeline.messages.EpochClosed`)."""

    spec: WorkerSpec
    stepper: Stepper
    prof: StepProfiler
    train: Any  # FeedChain
    val: Any  # FeedChain, or None without validation
    caches: dict[str, SampleCache]
    ranks: Ranks
    rank: int
    push: Callable[[Message], Any]
    save: Callable[..., None]  # checkpoint.save less the model, optimizer and schedule
    gauges: Observer | None = None
    data_ops: Callable[[], Any] | None = None  # Ray Data's operator stats of the last pass
    # wait for the pool controller's verdict on an epoch (data.autoscale), before streaming
    # the next (:func:`await_verdict`)
    pool_verdict: Callable[[int], Any] | None = None
    extra: tuple[Observer, ...] = ()  # watch the steps after the loop's own observers
    clock: Callable[[], float] = time.perf_counter
    unix: Callable[[], float] = time.time

    def __post_init__(self) -> None:
        cfg = self.spec.config
        self.spans = Spans(self.prof)
        self.checkpoints = MidEpochCheckpoints(
            cfg.train.checkpoint_every, self.stepper, self.prof, self.save,
            lambda ids: np.concatenate(self.ranks.gather(ids)))
        self.observers = Observers(
            self.spans, self.gauges, self.checkpoints,
            PoolPulse(self.push, self.rank, self.unix) if cfg.data.ours else None,
            DivergenceCheck(self.stepper),
            Progress(self.push, self.ranks.world) if self.rank == 0 else None, *self.extra)
        self.transfer: TransferStats | None = None

    def run(self, resume: checkpoint.Resume | None = None) -> None:
        first = resume.epoch if resume else 0
        for epoch in range(first, self.spec.config.train.epochs):
            resumed = resume is not None and epoch == resume.epoch and len(resume.consumed) > 0
            if epoch > first and self.pool_verdict and not self.train.replays:
                self.pool_verdict(epoch)  # the epoch before this one (from 1): judged
            self.epoch(epoch, resume.consumed if resumed else None)
        if self.prof.enabled:
            # The last epoch's report, checkpoint and validation (after its summary was sent):
            # the training phase's tail; and the timeline (the last steps and the phases around
            # them).
            self.push(ProfileTail(rank=self.rank, events=self.prof.trace_events(),
                                  profile=self.prof.epoch_summary(
                                      epoch=self.spec.config.train.epochs)))
        for cache in self.caches.values():
            cache.discard()

    def epoch(self, epoch: int, consumed: np.ndarray | None = None) -> dict[str, Any]:
        """One epoch; ``consumed``: the ids it trained before a restart (skipped now)."""
        stepper, prof = self.stepper, self.prof
        start, started_at = self.clock(), self.unix()
        streamed = not self.train.replays
        self.checkpoints.paused = consumed is not None
        with self.train.epoch(epoch, skip=consumed) as feeder, stepper.join(consumed is not None):
            done = train_pass(feeder, stepper, self.spans, self.observers, epoch=epoch,
                              field=self.spec.field, transform=augmenter(self.spec, epoch),
                              clock=self.clock)
        if stepper.accum > 1:  # a last, partial accumulation group (after the join: collective)
            with prof.span("optimizer"):
                stepper.finish_epoch(done.steps % stepper.accum)
        self.transfer = self.transfer.merged(feeder.stats) if self.transfer else feeder.stats
        wall = self.clock() - start
        with prof.phase("report"):
            metrics, profile = self._report(epoch, done, wall)
            self.push(EpochDone(
                rank=self.rank, epoch=epoch + 1, rank_samples=done.samples, rank_seconds=wall,
                line=metrics | {"cache": self.train.status(), "started_at": started_at,
                                "ended_at": self.unix()},
                transfer=self.transfer.as_dict(), ids=done.ids, profile=profile,
                # committed this epoch before the restart (every rank's), sent once
                resumed_ids=consumed if consumed is not None and self.rank == 0 else None,
                data_ops=(self.data_ops() if self.data_ops and self.rank == 0 and streamed
                          else None)))
        with prof.phase("checkpoint"):  # before validation: a stop there keeps this epoch
            self.save(epoch=epoch + 1, step=0, consumed=np.empty(0, np.int64), metrics=metrics)
        with prof.phase("validation"):
            val = self._validate(epoch, reserved={*metrics})
        if self.rank == 0:
            self.push(EpochClosed(epoch=epoch + 1, metrics=val, ended_at=self.unix()))
        return metrics | val

    def _validate(self, epoch: int, reserved: set[str]) -> dict[str, float]:
        """The task's validation metrics of ``epoch``, every rank's counts summed (empty
        without a validation split)."""
        if self.val is None:
            return {}
        with self.val.epoch(epoch) as val:
            counts = evaluate(self.stepper, val, self.spec.field)
        return task_metrics(self.stepper.task, all_counts(counts, self.ranks), reserved=reserved)

    def _report(self, epoch: int, done: Pass,
                wall: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The epoch's training metrics, the same on every rank, and its profile (collectives).
        The caches agree first: one replays only if every rank's is complete; once they do, the
        ranks deal the replayed epochs over the group ``data.reshuffle`` names."""
        _agree(self.caches, self.ranks)
        if self.train.replays and self.train.group is None:
            _share(self.train, self.ranks)
        samples, loss, steps = self.ranks.sum([done.samples, done.loss_sum, done.steps])
        metrics = {"epoch": epoch + 1, "samples": int(samples), "steps": done.steps,
                   "train_loss": loss / max(steps, 1), "epoch_seconds": wall,
                   "first_batch_seconds": done.first_batch_s,
                   "samples_per_second": samples / wall if wall > 0 else 0.0}
        profile = self._profile(epoch)
        # The straggler rule's input: work per step over the run so far, the numbers the
        # verdict reads (pipeline.profile.detectors.straggler); without spans, epoch time.
        work = self.prof.work_per_step() if self.prof.enabled else None
        work = max(1e-9, work if work is not None else wall / max(done.steps, 1))
        metrics["straggler"] = straggler_summary(
            self.ranks.step_times(work),
            straggler_ratio=self.spec.config.profile.straggler_ratio)
        return metrics, profile

    def _profile(self, epoch: int) -> dict[str, Any] | None:
        """Close the profile's window of this epoch. With several ranks, every rank first learns,
        step by step, the longest wait of any rank for its batch (a collective), so the
        all-reduce time it spent waiting for a peer's input is charged to input, not
        communication."""
        if not self.prof.enabled:
            return None
        peer = self.ranks.slowest_waits(self.prof.step_waits())
        return self.prof.epoch_summary(epoch=epoch + 1, peer_waits=peer)


def await_verdict(board: Any, epoch: int, timeout_s: float = VERDICT_WAIT_S) -> None:
    """Wait (a Train worker, before it streams the epoch after ``epoch``) until the driver's
    controller has judged ``epoch``'s totals, so the next execution's pool is the one the
    verdict set. Its pulse went when the pass ended; validation and the checkpoint usually
    outlast the judgement, and without them the next execution would start before it (the
    multi-node test's pool, shrunk 4 -> 2 at an epoch's end, ran the next epoch at 4). After
    ``timeout_s`` the epoch starts with the limit as it is."""
    import ray

    deadline, judged = time.monotonic() + timeout_s, 0
    with contextlib.suppress(ray.exceptions.GetTimeoutError):
        while (judged := ray.get(board.judged.remote(), timeout=timeout_s)) < epoch \
                and time.monotonic() < deadline:
            time.sleep(0.05)
    if judged < epoch:
        logger.warning("the pool controller did not judge epoch %d within %g s: the next "
                       "epoch starts with the pool as it is", epoch, timeout_s)


def train_loop(loop_config: dict[str, Any]) -> None:
    """A Train worker's run (Ray Train calls :func:`pipeline.train.spec.run_worker`);
    ``loop_config = {"spec": ObjectRef[WorkerSpec]}``. Builds this rank's parts from Ray
    Train's context and runs them (:class:`Worker`)."""
    import ray.train

    marks = {"process_start": process_start(), "entered": time.time()}
    spec: WorkerSpec = ray.get(loop_config["spec"])
    cfg = spec.config
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(cfg.train.cpus_per_worker)))
    torch.manual_seed(cfg.train.seed)
    if cfg.train.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    device = _device(spec.use_gpu)
    # before the first collective: torch creates NCCL communicators (and NCCL reads env) lazily
    nccl_plan = apply_rank_plan(spec.rank_plans, device_index=device.index) \
        if device.type == "cuda" and spec.rank_plans else None

    push = functools.partial(send, spec.reporter)
    prof = StepProfiler.from_config(cfg.profile, rank=rank, device=device)
    stepper = _build(spec, device, world, prof)
    # the driver learns why before Ray Train reports a failed worker (pushed and waited for)
    stepper.on_diverged = lambda message: ray.get(push(Diverged(rank=rank, message=message)),
                                                  timeout=30)
    ranks = Ranks(device, world)
    train_shard = ray.train.get_dataset_shard("train")
    caches = _caches(spec, ctx, ranks)
    feed = FeedSpec.from_config(cfg, spec.field)
    train = FeedChain(feed, train_shard, device=device, cache=caches["train"], rank=rank)
    val = None
    if spec.has_val:  # a file source's: read here; a ray source's: Ray Train's split
        val_shard = (spec.val_slices.shard(rank, world, quarantine=spec.reporter)
                     if spec.val_slices is not None else ray.train.get_dataset_shard("val"))
        val = FeedChain(feed, val_shard, device=device, cache=caches["val"], rank=rank,
                        train=False)

    resume = checkpoint.load(stepper.model, stepper.optimizer, device, cfg.train.resume_from,
                             stepper.scheduler)
    meta = {"task": task_name(stepper.task), "model": cfg.train.model,
            "input_shape": list(spec.sample_shape), "num_classes": spec.num_classes}
    push(Started(rank=rank, marks=marks, nccl_plan=nccl_plan,
                 resumed=None if resume is None else
                 {"epoch": resume.epoch, "step": resume.step, "consumed": len(resume.consumed)}))
    Worker(spec=spec, stepper=stepper, prof=prof, train=train, val=val, caches=caches,
           ranks=ranks, rank=rank, push=push,
           save=functools.partial(checkpoint.save, stepper.model, stepper.optimizer, meta=meta,
                                  scheduler=stepper.scheduler),
           gauges=Gauges(TrainMetrics(cfg.run.name, rank)),
           data_ops=lambda: operator_stats(train_shard.stats()),
           pool_verdict=(functools.partial(await_verdict, spec.reporter)
                         if cfg.data.elastic else None)).run(resume)
    if cfg.collective.probe and world > 1:
        _probe_link(spec, ctx, device)


def _probe_link(spec: WorkerSpec, ctx, device: torch.device) -> None:
    """A short all-reduce over the job's own process group, judged against the link's class."""
    rows = measure_collectives([1 << 20, 16 << 20], ops=("all_reduce",), iters=3, warmup=1,
                               device=device)
    if dist.get_rank() != 0:
        return
    best = max(rows, key=lambda r: r["busbw_GBps"])
    multi_node = ctx.get_local_world_size() < ctx.get_world_size()
    flag = classify_link(best["busbw_GBps"], dist.get_backend(), detect_topology(),
                         multi_node=multi_node)
    send(spec.reporter, LinkProbe(busbw_GBps=best["busbw_GBps"], size_bytes=best["size_bytes"],
                                  multi_node=multi_node, warning=flag))
