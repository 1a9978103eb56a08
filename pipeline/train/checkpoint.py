"""Checkpoints that resume mid-epoch: model, optimizer (and its learning-rate schedule), epoch
and the ids already consumed.

The data position is the set of sample ids the ranks trained on this epoch, not "skip N
batches": Ray Train re-splits the dataset among the restarted workers, so positions mean
nothing after a restart, while ids do. Files load with ``torch.load(weights_only=True)``,
never falling back to unrestricted unpickling. Runs in Train workers; :func:`state` and
:func:`restore` are the Ray-free halves. A checkpoint written before schedules existed (no
``scheduler`` entry) still loads: its run had a constant learning rate.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from pipeline import jsonio

logger = logging.getLogger(__name__)

STATE_FILE = "model.pt"
META_FILE = "meta.json"


@dataclass(frozen=True)
class Resume:
    """Where a restarted worker picks up: the epoch and the ids that epoch already trained."""

    epoch: int
    consumed: np.ndarray
    step: int


def load(model: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device,
         start_from: str = "", scheduler: Any = None) -> Resume | None:
    """Restore from Ray Train's latest checkpoint of this run (after a restart, or a rerun into
    the same run directory), else from ``start_from`` (``train.resume_from``), else None."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None and start_from:
        checkpoint = ray.train.Checkpoint.from_directory(start_from)
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as path:
        saved = torch.load(os.path.join(path, STATE_FILE), map_location=device,
                           weights_only=True)
    return restore(saved, model, optimizer, scheduler)


def state(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any, *,
          epoch: int, step: int, consumed: np.ndarray) -> dict[str, Any]:
    """What ``model.pt`` holds (``scheduler`` None: a constant learning rate, nothing to keep)."""
    out = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch,
           "step": step, "consumed": torch.as_tensor(consumed, dtype=torch.int64)}
    if scheduler is not None:
        out["scheduler"] = scheduler.state_dict()
    return out


def restore(saved: dict[str, Any], model: torch.nn.Module, optimizer: torch.optim.Optimizer,
            scheduler: Any = None) -> Resume:
    """Load a :func:`state` into the model, optimizer and scheduler; where to pick up."""
    try:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
    except (RuntimeError, ValueError, KeyError) as exc:
        first = " ".join(line.strip() for line in str(exc).strip().splitlines()[:2]) or (
            type(exc).__name__)
        raise ValueError(
            f"the checkpoint does not fit this run's model or optimizer ({first}): "
            f"train.model, the task's build_model or configure_optimizer changed since it was "
            f"saved; resume with the ones it was made with, or start a new run.output") from exc
    if scheduler is not None:
        if "scheduler" in saved:
            scheduler.load_state_dict(saved["scheduler"])
        else:
            logger.warning("the checkpoint has no learning-rate schedule (written with a constant "
                           "rate): the schedule starts again from its first step")
    return Resume(epoch=int(saved["epoch"]), consumed=saved["consumed"].cpu().numpy(),
                  step=int(saved.get("step", 0)))


def save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, *, epoch: int, step: int,
         consumed: np.ndarray, metrics: dict[str, Any], meta: dict[str, Any],
         scheduler: Any = None) -> None:
    """Report ``metrics`` with a checkpoint written by rank 0 (every rank must call this)."""
    import ray.train

    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = None
        if not dist.is_initialized() or dist.get_rank() == 0:
            torch.save(state(model, optimizer, scheduler, epoch=epoch, step=step,
                             consumed=consumed), os.path.join(tmp, STATE_FILE))
            with open(os.path.join(tmp, META_FILE), "w") as fh:
                fh.write(jsonio.dumps(meta | {"epoch": epoch, "step": step, "metrics": metrics},
                                      default=str))
            checkpoint = ray.train.Checkpoint.from_directory(tmp)
        ray.train.report(metrics, checkpoint=checkpoint)
