"""What the driver hands every Train worker: its :class:`WorkerSpec` and :func:`run_worker`,
Ray Train's entry point. Torch-free: the driver imports this module, and Ray Train's controller
keeps the loop's config; the loop (:mod:`pipeline.train.loop`), and torch with it, is imported
on the workers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pipeline.config import Config


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
    val_slices: Any = None  # RankSlices: validation read in the ranks (file sources)
    rank_plans: Any = None  # hostname → per-GPU NCCL plans (pipeline.collective.ranks)


def run_worker(loop_config: dict[str, Any]) -> None:
    """Ray Train's entry point (``train_loop_per_worker``): :func:`pipeline.train.loop.train_loop`
    with ``loop_config = {"spec": ObjectRef[WorkerSpec]}``."""
    from pipeline.train.loop import train_loop

    train_loop(loop_config)
