"""The per-worker training loop: runs inside each Ray Train worker.

Each epoch the worker iterates its shard of the training set (Ray Data already decoded it on
CPU workers) through the transfer stage, trains the DDP-wrapped model with every step split into
profiled phases, evaluates on its shard of the validation set, and all-reduces the counts so
every rank reports the same metrics (the passes: :mod:`pipeline.train.epoch`). The run's
:class:`~pipeline.train.task.Task` supplies the model, the optimizer, the loss and the
validation counts; the rest is the loop's (:mod:`pipeline.train.step`: precision, accumulation,
clipping, the schedule). Progress, spans and the ids it trained on go to the driver through the
:class:`~pipeline.job.inbox.RunInbox`. Every epoch ends with a checkpoint;
``train.checkpoint_every`` adds mid-epoch ones that hold the ids consumed so far, so a restarted
worker group resumes where it stopped (:mod:`pipeline.train.checkpoint`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from pipeline.collective import (
    classify_link,
    detect_topology,
    gather_step_times,
    measure_collectives,
    straggler_summary,
    wrap_ddp,
)
from pipeline.collective.ranks import apply_rank_plan
from pipeline.collective.straggler import slowest_waits
from pipeline.config import Config
from pipeline.messages import Diverged, EpochDone, LinkProbe, ProfileTail, Started, send
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
from pipeline.train.epoch import all_counts, evaluate, task_metrics, train_epoch
from pipeline.train.reshuffle import global_needs_streaming, group_of
from pipeline.train.step import Stepper, schedule_steps
from pipeline.train.task import resolve_task, task_name
from pipeline.transfer import TransferStats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, decided on the driver; it pickles (plain values, the task,
    and the run inbox's actor handle)."""

    config: Config
    field: str
    sample_shape: tuple[int, ...]
    num_classes: int
    use_gpu: bool
    has_val: bool
    reporter: Any  # RunInbox handle
    num_train: int = 0
    num_val: int = 0
    task: Any = None  # a Task (resolved on the driver); None: train.task, resolved here
    row_bytes: int = 0  # one row as the worker receives it; 0: estimated from sample_shape
    rank_plans: Any = None  # hostname → per-GPU NCCL plans (pipeline.collective.ranks)


def _device(use_gpu: bool) -> torch.device:
    if use_gpu:
        import ray.train.torch

        return ray.train.torch.get_device()
    return torch.device("cpu")


def _caches(spec: WorkerSpec, ctx, device: torch.device) -> dict[str, SampleCache]:
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
    budget, free = _all_min([memory, disk_free(dirs["train"][1])], device)
    caches = {name: rank_cache(cfg.cache_mode, rows=rows, per_sample=per_sample, world=world,
                               budget=budget, free=int(free), memory_dir=dirs[name][0],
                               disk_dir=dirs[name][1],
                               deterministic=spec.config.train.deterministic)
              for name, rows in (("train", spec.num_train), ("val", spec.num_val))}
    streaming = global_needs_streaming(cfg.reshuffle, _all_gather(socket.gethostname(), world))
    if streaming and caches["train"].enabled:
        caches["train"] = SampleCache(CacheDecision("off", streaming))
    return caches


def _share(chain: FeedChain, world: int) -> None:
    """Once every rank's training cache is complete: swap what each holds and deal the replayed
    epochs over the group ``data.reshuffle`` names (:mod:`pipeline.train.reshuffle`)."""
    shards = _all_gather(chain.shard_info(socket.gethostname()), world)
    group = group_of(chain.spec.reshuffle, shards, chain.rank)
    chain.share(group, shards)
    logger.info("cache: %s", group.reason)


def _all_gather(value: Any, world: int) -> list[Any]:
    if world == 1 or not dist.is_initialized():
        return [value]
    out: list[Any] = [None] * world
    dist.all_gather_object(out, value)
    return out


def _agree(caches: dict[str, SampleCache], device: torch.device) -> None:
    """After a pass: a cache replays only if every rank's is complete (else ranks would mix
    replayed and streamed epochs, and streaming_split waits for every rank)."""
    names = sorted(caches)
    flags = _all_min([float(caches[n].complete) for n in names], device)
    for name, flag in zip(names, flags, strict=True):
        if caches[name].complete and not flag:
            caches[name].discard()


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def _all_min(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
    return t.tolist()


def _epoch_profile(prof: StepProfiler, epoch: int, device: torch.device,
                   world: int) -> dict[str, Any] | None:
    """Close the profile's window of this epoch. With several ranks, every rank first learns,
    step by step, the longest wait of any rank for its batch (a collective), so the all-reduce
    time it spent waiting for a peer's input is charged to input, not communication."""
    if not prof.enabled:
        return None
    peer = slowest_waits(prof.step_waits(), device=device) if world > 1 else None
    return prof.epoch_summary(epoch=epoch + 1, peer_waits=peer)


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
                   device=device,
                   accum=cfg.train.grad_accum_steps, clip=cfg.train.grad_clip_norm,
                   precision=cfg.train.precision, max_nonfinite=cfg.train.max_nonfinite_steps)


def train_loop(loop_config: dict[str, Any]) -> None:
    """Entry point given to ``TorchTrainer``; ``loop_config = {"spec": WorkerSpec}``."""
    import ray.train

    marks = {"process_start": process_start(), "entered": time.time()}

    spec: WorkerSpec = loop_config["spec"]
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

    prof = StepProfiler.from_config(cfg.profile, rank=rank, device=device)
    gauges = TrainMetrics(cfg.run.name, rank)
    stepper = _build(spec, device, world, prof)
    # the driver learns why before Ray Train reports a failed worker (pushed and waited for)
    stepper.on_diverged = lambda message: ray.get(
        send(spec.reporter, Diverged(rank=rank, message=message)), timeout=30)
    model, ddp, optimizer, scheduler = (stepper.model, stepper.ddp, stepper.optimizer,
                                        stepper.scheduler)
    train_shard = ray.train.get_dataset_shard("train")
    caches = _caches(spec, ctx, device)
    feed = FeedSpec.from_config(cfg, spec.field)
    train = FeedChain(feed, train_shard, device=device, cache=caches["train"], rank=rank)
    val = (FeedChain(feed, ray.train.get_dataset_shard("val"), device=device,
                     cache=caches["val"], rank=rank, train=False) if spec.has_val else None)

    resume = checkpoint.load(model, optimizer, device, cfg.train.resume_from, scheduler)
    meta = {"task": task_name(stepper.task), "model": cfg.train.model,
            "input_shape": list(spec.sample_shape), "num_classes": spec.num_classes}
    send(spec.reporter, Started(rank=rank, marks=marks, nccl_plan=nccl_plan,
                                resumed=None if resume is None else
                                {"epoch": resume.epoch, "step": resume.step,
                                 "consumed": len(resume.consumed)}))
    metrics: dict[str, Any] = {}
    transfer: TransferStats | None = None
    for epoch in range(resume.epoch if resume else 0, cfg.train.epochs):
        resumed = resume is not None and epoch == resume.epoch and len(resume.consumed) > 0
        skip = resume.consumed if resumed else None

        def on_step(steps: int, ids: list, epoch: int = epoch) -> None:
            # Mid-epoch checkpoints need every rank at the same step; after a resume the ranks'
            # step counts differ (each skips different ids), so that epoch saves at its end only.
            every = cfg.train.checkpoint_every
            if every and (steps // stepper.accum) % every == 0:
                stepper.check_finite(epoch)  # never a checkpoint of diverged weights
                with prof.phase("checkpoint"):
                    mine = torch.cat(ids).cpu().numpy()
                    checkpoint.save(model, optimizer, epoch=epoch, step=steps,
                                    consumed=checkpoint.all_consumed(mine), meta=meta,
                                    metrics={"epoch": epoch + 1, "step": steps},
                                    scheduler=scheduler)

        start, started_at = time.perf_counter(), time.time()
        # Uneven inputs after a resume: DDP's join keeps ranks that run out in step with the rest.
        uneven = ddp.join() if resumed and isinstance(ddp, nn.parallel.DistributedDataParallel) \
            else contextlib.nullcontext()
        streamed = not train.replays
        with train.epoch(epoch, skip=skip) as feeder, uneven:
            samples, steps, loss_sum, first_batch_s, seen = train_epoch(
                feeder, stepper, prof, gauges, spec, epoch, device,
                on_step=None if resumed else on_step)
        if stepper.accum > 1:  # a last, partial accumulation group (after the join: collective)
            with prof.span("optimizer"):
                stepper.finish_epoch(steps % stepper.accum)
        gauges.flush()
        transfer = transfer.merged(feeder.stats) if transfer else feeder.stats
        wall = time.perf_counter() - start
        with prof.phase("validation"):
            counts = {}
            if val is not None:
                with val.epoch(epoch) as feeder:
                    counts = evaluate(stepper, feeder, spec.field)
        with prof.phase("report"):
            _agree(caches, device)
            if train.replays and train.group is None:
                _share(train, world)
            g_samples, g_loss, g_steps = _all_sum([samples, loss_sum, steps], device)
            metrics = {
                "epoch": epoch + 1,
                "samples": int(g_samples),
                "steps": steps,
                "train_loss": g_loss / max(g_steps, 1),
                "epoch_seconds": wall,
                "first_batch_seconds": first_batch_s,
                "samples_per_second": g_samples / wall if wall > 0 else 0.0,
            }
            if val is not None:
                metrics |= task_metrics(stepper.task, all_counts(counts, device, world),
                                        reserved={*metrics, "straggler"})
            profile = _epoch_profile(prof, epoch, device, world)
            # The straggler rule's input: work per step over the run so far, the numbers the
            # verdict reads (pipeline.profile.detectors.straggler); without spans, epoch time.
            work = prof.work_per_step() if prof.enabled else None
            work = max(1e-9, work if work is not None else wall / max(steps, 1))
            per_rank = gather_step_times(work, device=device) if world > 1 else {0: work}
            metrics["straggler"] = straggler_summary(per_rank,
                                                     straggler_ratio=cfg.profile.straggler_ratio)
            send(spec.reporter, EpochDone(
                rank=rank, epoch=epoch + 1, rank_samples=samples, rank_seconds=wall,
                line=metrics | {"cache": train.status(), "started_at": started_at,
                                "ended_at": time.time()},
                transfer=transfer.as_dict(), ids=seen, profile=profile,
                # committed this epoch before the restart (every rank's), sent once
                resumed_ids=resume.consumed if resumed and rank == 0 else None,
                # operator stats come from rank 0
                data_ops=(operator_stats(train_shard.stats()) if rank == 0 and streamed
                          else None)))
        # every epoch ends with a checkpoint: a restart resumes at the next epoch
        with prof.phase("checkpoint"):
            checkpoint.save(model, optimizer, epoch=epoch + 1, step=0,
                            consumed=np.empty(0, np.int64), metrics=metrics, meta=meta,
                            scheduler=scheduler)
    if prof.enabled:
        # The last epoch's report and checkpoint (after its summary was sent): the training
        # phase's tail; and the timeline (the last steps and the phases around them).
        send(spec.reporter, ProfileTail(rank=rank,
                                        profile=prof.epoch_summary(epoch=cfg.train.epochs),
                                        events=prof.trace_events()))
    for cache in caches.values():
        cache.discard()
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
