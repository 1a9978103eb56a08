"""The per-worker training loop: runs inside each Ray Train worker.

Each epoch the worker iterates its shard of the training set (Ray Data already decoded it on
CPU workers) through the transfer stage, trains the DDP-wrapped model with every step split into
profiled phases, evaluates on its shard of the validation set, and all-reduces the counts so
every rank reports the same accuracy. Progress, spans and the ids it trained on go to the driver
through the :class:`~pipeline.train.reporter.RunReporter`. Every epoch ends with a checkpoint;
``train.checkpoint_every`` adds mid-epoch ones that hold the ids consumed so far, so a restarted
worker group resumes where it stopped (:mod:`pipeline.train.checkpoint`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
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
from pipeline.collective.straggler import slowest_waits
from pipeline.config import Config
from pipeline.data.augment import augment
from pipeline.data.cache import (
    SampleCache,
    available_memory,
    cache_dir,
    disk_free,
    epoch_batches,
    rank_cache,
)
from pipeline.profile import StepProfiler, operator_stats, timed_hook
from pipeline.profile.metrics import TrainMetrics
from pipeline.train import checkpoint
from pipeline.train.models import build_model
from pipeline.transfer import DeviceFeeder, TransferStats

logger = logging.getLogger(__name__)

PROGRESS_EVERY_S = 1.0


@dataclass(frozen=True)
class WorkerSpec:
    """Everything a worker needs, decided on the driver; plain values so it pickles."""

    config: Config
    field: str
    sample_shape: tuple[int, ...]
    num_classes: int
    use_gpu: bool
    has_val: bool
    reporter: Any  # RunReporter handle
    num_train: int = 0
    num_val: int = 0


def _device(use_gpu: bool) -> torch.device:
    if use_gpu:
        import ray.train.torch

        return ray.train.torch.get_device()
    return torch.device("cpu")


def _feeder(shard, spec: WorkerSpec, device: torch.device, shuffle_seed: int | None = None,
            cache: SampleCache | None = None, record: bool = True) -> DeviceFeeder:
    """One epoch of the shard (or of its cache, once complete), host batches → device batches
    (transfer stage); see :func:`pipeline.data.cache.epoch_batches`."""
    cfg = spec.config
    batches = epoch_batches(shard, cache, batch_size=cfg.train.batch_size,
                            prefetch_batches=cfg.data.prefetch_batches,
                            shuffle_buffer=cfg.data.shuffle_buffer if shuffle_seed is not None
                            else 0, shuffle_seed=shuffle_seed, record=record)
    transfer = cfg.transfer
    if spec.field != "image":  # feature columns are float already; only images ship as uint8
        transfer = replace(transfer, ship_uint8=False)
    uint8 = {"image": cfg.data.channel_stats()} if transfer.ship_uint8 else None
    return DeviceFeeder.from_config(batches, transfer, device=device, uint8_normalize=uint8,
                                    timeout_s=cfg.data.stall_timeout_s)


def _caches(spec: WorkerSpec, ctx, device: torch.device) -> dict[str, SampleCache]:
    """This rank's decoded-sample caches (train, val), sized as ``data.cache`` asks. Every rank
    decides from the same numbers (the smallest budget of any rank), so all replay or none."""
    cfg = spec.config.data
    world = ctx.get_world_size()
    per_sample = int(np.prod(spec.sample_shape)) * (
        1 if spec.field == "image" and spec.config.transfer.ship_uint8 else 4) + 16
    dirs = {name: cache_dir(cfg.cache_dir, spec.config.run.name, name, ctx.get_world_rank())
            for name in ("train", "val")}
    budget, free = _all_min([available_memory() * cfg.cache_memory_fraction
                             / max(1, ctx.get_local_world_size()), disk_free(dirs["train"])],
                            device)
    return {name: rank_cache(cfg.cache_mode, rows=rows, per_sample=per_sample, world=world,
                             budget=budget, free=int(free), directory=dirs[name],
                             deterministic=spec.config.train.deterministic)
            for name, rows in (("train", spec.num_train), ("val", spec.num_val))}


def _agree(caches: dict[str, SampleCache], device: torch.device) -> None:
    """After a pass: a cache replays only if every rank's is complete (else ranks would mix
    replayed and streamed epochs, and streaming_split waits for every rank)."""
    names = sorted(caches)
    flags = _all_min([float(caches[n].complete) for n in names], device)
    for name, flag in zip(names, flags, strict=True):
        if caches[name].complete and not flag:
            caches[name].discard()


def _evaluate(model: nn.Module, shard, spec: WorkerSpec, device: torch.device,
              cache: SampleCache | None = None) -> tuple[int, int]:
    correct = torch.zeros((), dtype=torch.int64, device=device)  # on device: no sync per batch
    total = 0
    model.eval()
    with torch.no_grad(), _feeder(shard, spec, device, cache=cache) as feeder:
        for batch in feeder:
            y = batch["label"]
            correct += (model(_layout(batch[spec.field])).argmax(dim=1) == y).sum()
            total += len(y)
    model.train()
    return int(correct), total


def _train_epoch(feeder: DeviceFeeder, ddp: nn.Module, optimizer, prof: StepProfiler,
                 gauges: TrainMetrics, spec: WorkerSpec, epoch: int, device: torch.device,
                 skip: torch.Tensor | None = None,
                 on_step: Callable[[int, list], None] | None = None,
                 ) -> tuple[int, int, float, float, np.ndarray]:
    """One pass over the shard; every step is split into profiled phases.

    ``h2d`` is the copy time the feeder spent on this step's batch, counted only up to the time
    the step actually waited for it (``data_wait``): copies hidden behind compute cost nothing.
    ``skip`` holds ids this epoch already trained before a restart; they are dropped from the
    batches. ``on_step(steps, ids)`` runs after every step (mid-epoch checkpoints).
    """
    loss_fn = nn.CrossEntropyLoss()
    augment_config, seed = spec.config.data.augment, spec.config.data.seed
    world = dist.get_world_size() if dist.is_initialized() else 1
    rank = dist.get_rank() if dist.is_initialized() else 0
    samples = steps = 0
    loss_sum = torch.zeros((), device=device)  # summed on device: no sync per step
    last_push = time.perf_counter()
    copy_s = 0.0
    moved = 0
    ids = []  # device tensors; one copy to the host at the end of the epoch, not one per step
    batches = iter(feeder)

    def fetch() -> dict | None:
        """The next batch, without the ids a restarted epoch already trained."""
        for batch in batches:
            if skip is None:
                return batch
            keep = ~torch.isin(batch["id"], skip)
            if keep.any():
                return {k: v[keep] for k, v in batch.items()}
        return None

    # The first batch of an epoch waits for Ray Data to start (actors, first blocks): the
    # profile's `startup` phase, also reported as first_batch_s.
    step_start = time.perf_counter()
    with prof.phase("startup"):
        batch = fetch()
    first_batch_s = waited = time.perf_counter() - step_start
    while batch is not None:
        stats = feeder.stats
        if steps:
            prof.add("h2d", min(stats.copy_s - copy_s, waited), within="data_wait")
        copy_s = stats.copy_s
        x, y = _layout(batch[spec.field]), batch["label"]
        ids.append(batch["id"])
        with prof.span("forward"):  # augmentation is device work of the step: counted here
            if augment_config.enabled:
                x = augment(x, batch["id"], seed=seed, epoch=epoch, config=augment_config)
            loss = loss_fn(ddp(x), y)
        with prof.span("backward"):
            loss.backward()
        with prof.span("optimizer"):
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        prof.step_done(samples=len(y))
        now = time.perf_counter()
        gauges.step(samples=len(y), step_s=now - step_start, wait_s=waited,
                    h2d_bytes=stats.bytes - moved)
        step_start, moved = now, stats.bytes
        samples += len(y)
        steps += 1
        loss_sum += loss.detach()
        if on_step is not None:
            on_step(steps, ids)
        if rank == 0 and now - last_push >= PROGRESS_EVERY_S:
            spec.reporter.push.remote({"type": "progress", "epoch": epoch,
                                       "samples": samples * world})
            last_push = now
        waited = time.perf_counter()
        with prof.span("data_wait"):
            batch = fetch()
        waited = time.perf_counter() - waited
    seen = torch.cat(ids).cpu().numpy() if ids else np.empty(0, np.int64)
    return samples, steps, float(loss_sum), first_batch_s, seen


def _layout(x: torch.Tensor) -> torch.Tensor:
    """Image batches in channels-last memory: oneDNN's (and cuDNN's tensor-core) convolutions
    run faster on it (measured here: the bench CNN's step at 128² took 0.42-0.45 s instead of
    0.58-0.66 s on one CPU thread), which is what a plain loop gets by permuting NHWC arrays."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x


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


def train_loop(loop_config: dict[str, Any]) -> None:
    """Entry point given to ``TorchTrainer``; ``loop_config = {"spec": WorkerSpec}``."""
    import ray.train

    spec: WorkerSpec = loop_config["spec"]
    cfg = spec.config
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(cfg.train.cpus_per_worker)))
    torch.manual_seed(cfg.train.seed)
    if cfg.train.deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    device = _device(spec.use_gpu)

    model = build_model(cfg.train.model, input_shape=spec.sample_shape,
                        num_classes=spec.num_classes).to(device)
    if len(spec.sample_shape) == 3:  # images: convolutions run channels-last (see _layout)
        model = model.to(memory_format=torch.channels_last)
    prof = StepProfiler.from_config(cfg.profile, rank=rank, device=device)
    gauges = TrainMetrics(cfg.run.name, rank)
    timing = ((lambda hook, state: timed_hook(hook, state, prof.comm_timer))
              if prof.enabled else None)
    ddp = (wrap_ddp(model, cfg.collective, device=device, hook_wrapper=timing)
           if dist.is_initialized() and world > 1 else model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=cfg.train.lr, momentum=0.9)
    train_shard = ray.train.get_dataset_shard("train")
    val_shard = ray.train.get_dataset_shard("val") if spec.has_val else None
    caches = _caches(spec, ctx, device)

    resume = checkpoint.load(model, optimizer, device, cfg.train.resume_from)
    meta = {"model": cfg.train.model, "input_shape": list(spec.sample_shape),
            "num_classes": spec.num_classes}
    spec.reporter.push.remote({"type": "start", "rank": rank, "ready_at": time.time(),
                               "resumed": None if resume is None else
                               {"epoch": resume.epoch, "step": resume.step,
                                "consumed": len(resume.consumed)}})
    metrics: dict[str, Any] = {}
    transfer: TransferStats | None = None
    for epoch in range(resume.epoch if resume else 0, cfg.train.epochs):
        resumed = resume is not None and epoch == resume.epoch and len(resume.consumed) > 0
        skip = torch.as_tensor(resume.consumed, device=device) if resumed else None

        def on_step(steps: int, ids: list, epoch: int = epoch) -> None:
            # Mid-epoch checkpoints need every rank at the same step; after a resume the ranks'
            # step counts differ (each skips different ids), so that epoch saves at its end only.
            every = cfg.train.checkpoint_every
            if every and steps % every == 0:
                with prof.phase("checkpoint"):
                    mine = torch.cat(ids).cpu().numpy()
                    checkpoint.save(model, optimizer, epoch=epoch, step=steps,
                                    consumed=checkpoint.all_consumed(mine), meta=meta,
                                    metrics={"epoch": epoch + 1, "step": steps})

        start, started_at = time.perf_counter(), time.time()
        # Uneven inputs after a resume: DDP's join keeps ranks that run out in step with the rest.
        uneven = ddp.join() if resumed and isinstance(ddp, nn.parallel.DistributedDataParallel) \
            else contextlib.nullcontext()
        # a new window shuffle every epoch, the same one after a restart
        shuffle_seed = int(np.random.SeedSequence([cfg.data.seed, epoch, rank])
                           .generate_state(1)[0])
        streamed = not caches["train"].complete
        with _feeder(train_shard, spec, device, shuffle_seed, caches["train"],
                     record=not resumed) as feeder, uneven:
            samples, steps, loss_sum, first_batch_s, seen = _train_epoch(
                feeder, ddp, optimizer, prof, gauges, spec, epoch, device, skip=skip,
                on_step=None if resumed else on_step)
        gauges.flush()
        transfer = transfer.merged(feeder.stats) if transfer else feeder.stats
        wall = time.perf_counter() - start
        with prof.phase("validation"):
            correct, total = (_evaluate(model, val_shard, spec, device, caches["val"])
                              if val_shard else (0, 0))
        with prof.phase("report"):
            _agree(caches, device)
            g_samples, g_loss, g_steps, g_correct, g_total = _all_sum(
                [samples, loss_sum, steps, correct, total], device)
            metrics = {
                "epoch": epoch + 1,
                "samples": int(g_samples),
                "steps": steps,
                "train_loss": g_loss / max(g_steps, 1),
                "epoch_seconds": wall,
                "first_batch_seconds": first_batch_s,
                "samples_per_second": g_samples / wall if wall > 0 else 0.0,
            }
            if g_total:
                metrics["val_accuracy"] = g_correct / g_total
                metrics["val_samples"] = int(g_total)
            profile = _epoch_profile(prof, epoch, device, world)
            # The straggler rule's input: work per step over the run so far, the numbers the
            # verdict reads (pipeline.profile.detectors.straggler); without spans, epoch time.
            work = prof.work_per_step() if prof.enabled else None
            work = max(1e-9, work if work is not None else wall / max(steps, 1))
            per_rank = gather_step_times(work, device=device) if world > 1 else {0: work}
            metrics["straggler"] = straggler_summary(per_rank,
                                                     straggler_ratio=cfg.profile.straggler_ratio)
            spec.reporter.push.remote({
                "type": "epoch", "rank": rank, **metrics, "rank_samples": samples,
                "rank_seconds": wall, "transfer": transfer.as_dict(), "ids": seen,
                # committed this epoch before the restart (every rank's), sent once
                "resumed_ids": resume.consumed if resumed and rank == 0 else None,
                "profile": profile,
                "cache": caches["train"].status(), "started_at": started_at,
                "ended_at": time.time(),
                # operator stats come from rank 0
                "data_ops": (operator_stats(train_shard.stats()) if rank == 0 and streamed
                             else None)})
        # every epoch ends with a checkpoint: a restart resumes at the next epoch
        with prof.phase("checkpoint"):
            checkpoint.save(model, optimizer, epoch=epoch + 1, step=0,
                            consumed=np.empty(0, np.int64), metrics=metrics, meta=meta)
    if prof.enabled:
        # The last epoch's report and checkpoint (after its summary was sent): the training
        # phase's tail; and the timeline (the last steps and the phases around them).
        spec.reporter.push.remote({"type": "profile_tail", "rank": rank,
                                   "profile": prof.epoch_summary(epoch=cfg.train.epochs),
                                   "events": prof.trace_events()})
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
    spec.reporter.push.remote({"type": "probe", "busbw_GBps": best["busbw_GBps"],
                               "size_bytes": best["size_bytes"], "multi_node": multi_node,
                               "warning": flag})
