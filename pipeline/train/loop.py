"""The per-worker training loop: runs inside each Ray Train worker.

Each epoch the worker iterates its shard of the training set (Ray Data already decoded it on
CPU workers), trains the DDP-wrapped model, evaluates on its shard of the validation set, and
all-reduces the counts so every rank reports the same accuracy. Progress goes to the driver
through the :class:`~pipeline.train.reporter.RunReporter`; rank 0 writes the final checkpoint.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from pipeline.config import Config
from pipeline.train.models import build_model

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


def _device(use_gpu: bool) -> torch.device:
    if use_gpu:
        import ray.train.torch

        return ray.train.torch.get_device()
    return torch.device("cpu")


def _to_device(batch: dict[str, Any], field: str, device: torch.device):
    return torch.as_tensor(batch[field]).to(device), torch.as_tensor(batch["label"]).to(device)


def _evaluate(model: nn.Module, shard, spec: WorkerSpec, device: torch.device) -> tuple[int, int]:
    cfg = spec.config
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for batch in shard.iter_batches(batch_size=cfg.train.batch_size, batch_format="numpy",
                                        prefetch_batches=cfg.data.prefetch_batches):
            x, y = _to_device(batch, spec.field, device)
            correct += int((model(x).argmax(dim=1) == y).sum())
            total += len(y)
    model.train()
    return correct, total


def _all_sum(values: list[float], device: torch.device) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64, device=device)
    if dist.is_initialized():
        dist.all_reduce(t)
    return t.tolist()


def train_loop(loop_config: dict[str, Any]) -> None:
    """Entry point given to ``TorchTrainer``; ``loop_config = {"spec": WorkerSpec}``."""
    import ray.train

    spec: WorkerSpec = loop_config["spec"]
    cfg = spec.config
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.set_num_threads(max(1, int(cfg.train.cpus_per_worker)))
    torch.manual_seed(cfg.train.seed)
    device = _device(spec.use_gpu)

    model = build_model(cfg.train.model, input_shape=spec.sample_shape,
                        num_classes=spec.num_classes).to(device)
    ddp = (nn.parallel.DistributedDataParallel(model, device_ids=[device] if spec.use_gpu else None)
           if dist.is_initialized() and world > 1 else model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=cfg.train.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    train_shard = ray.train.get_dataset_shard("train")
    val_shard = ray.train.get_dataset_shard("val") if spec.has_val else None

    metrics: dict[str, Any] = {}
    for epoch in range(cfg.train.epochs):
        start = last_push = time.perf_counter()
        samples = steps = 0
        loss_sum = 0.0
        for batch in train_shard.iter_batches(batch_size=cfg.train.batch_size,
                                              batch_format="numpy",
                                              prefetch_batches=cfg.data.prefetch_batches):
            x, y = _to_device(batch, spec.field, device)
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(ddp(x), y)
            loss.backward()
            optimizer.step()
            samples += len(y)
            steps += 1
            loss_sum += float(loss.detach())
            now = time.perf_counter()
            if rank == 0 and now - last_push >= PROGRESS_EVERY_S:
                spec.reporter.push.remote({"type": "progress", "epoch": epoch,
                                           "samples": samples * world})
                last_push = now
        wall = time.perf_counter() - start
        correct, total = _evaluate(model, val_shard, spec, device) if val_shard else (0, 0)
        g_samples, g_loss, g_steps, g_correct, g_total = _all_sum(
            [samples, loss_sum, steps, correct, total], device)
        metrics = {
            "epoch": epoch + 1,
            "samples": int(g_samples),
            "steps": steps,
            "train_loss": g_loss / max(g_steps, 1),
            "epoch_seconds": wall,
            "samples_per_second": g_samples / wall if wall > 0 else 0.0,
        }
        if g_total:
            metrics["val_accuracy"] = g_correct / g_total
            metrics["val_samples"] = int(g_total)
        spec.reporter.push.remote({"type": "epoch", "rank": rank, **metrics,
                                   "rank_samples": samples, "rank_seconds": wall})
        if epoch + 1 < cfg.train.epochs:
            ray.train.report(metrics)

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": cfg.train.epochs}, os.path.join(tmp, "model.pt"))
            with open(os.path.join(tmp, "meta.json"), "w") as fh:
                json.dump({"model": cfg.train.model, "input_shape": list(spec.sample_shape),
                           "num_classes": spec.num_classes, "metrics": metrics}, fh)
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)
