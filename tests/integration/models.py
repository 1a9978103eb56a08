"""User model factories for the integration tests (``train.model: module:factory``)."""

import json
import os
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

from pipeline.train.models import mlp, small_cnn


class Sleepy(nn.Module):
    """Wraps a model and sleeps in each training forward: a compute step the data path can
    easily feed (validation, in eval mode, runs at the inner model's speed)."""

    def __init__(self, inner: nn.Module, seconds: float, only_rank: int | None = None):
        super().__init__()
        self.inner, self.seconds, self.only_rank = inner, seconds, only_rank

    def forward(self, x):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if self.training and (self.only_rank is None or rank == self.only_rank):
            time.sleep(self.seconds)
        return self.inner(x)


def slow_cnn(*, input_shape, num_classes):
    return Sleepy(small_cnn(input_shape=input_shape, num_classes=num_classes), 0.08)


def slow_rank_one_cnn(*, input_shape, num_classes):
    return Sleepy(small_cnn(input_shape=input_shape, num_classes=num_classes), 0.08, only_rank=1)


def slow_mlp(*, input_shape, num_classes):
    """Feature columns, 300 ms of "compute" per training step on every rank."""
    return Sleepy(mlp(input_shape=input_shape, num_classes=num_classes), 0.3)


def slow_rank_one_mlp(*, input_shape, num_classes):
    """Feature columns; rank 1 alone spends 300 ms more per training step."""
    return Sleepy(mlp(input_shape=input_shape, num_classes=num_classes), 0.3, only_rank=1)


class HeavyGradients(nn.Module):
    """A tiny model plus large parameters that cost almost nothing to compute but whose dense
    gradients DDP must all-reduce every step: communication with little compute. Split in
    ``parts`` tensors so small DDP buckets turn them into many all-reduces."""

    def __init__(self, inner: nn.Module, numel: int, parts: int):
        super().__init__()
        self.inner = inner
        self.ballast = nn.ParameterList(nn.Parameter(torch.zeros(numel // parts))
                                        for _ in range(parts))

    def forward(self, x):
        # sum() gives every element a gradient of 1: the whole tensor goes through the
        # all-reduce, for one pass over memory of compute.
        return self.inner(x) + sum(p.sum() for p in self.ballast) * 0.0


def heavy_gradients_mlp(*, input_shape, num_classes):
    """Feature columns; 8 M extra parameters in 128 tensors (32 MB of float32 gradients per
    step)."""
    return HeavyGradients(mlp(input_shape=input_shape, num_classes=num_classes), 8 << 20, 128)


KILL_PLAN = Path(tempfile.gettempdir()) / "feedline-test-train-kill.json"


class AtStep(nn.Module):
    """Wraps a model and calls ``at(rank, step)`` at each training step (counted from 1)."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.steps = inner, 0

    def forward(self, x):
        if self.training:
            self.steps += 1
            self.at(dist.get_rank() if dist.is_initialized() else 0, self.steps)
        return self.inner(x)

    def at(self, rank: int, step: int) -> None:
        raise NotImplementedError


class DiesOnce(AtStep):
    """Kills its Train worker (``os._exit``) at a planned training step, on the first attempt."""

    def at(self, rank, step):
        plan = json.loads(KILL_PLAN.read_text()) if KILL_PLAN.exists() else None
        if plan and rank == plan["rank"] and step == plan["step"]:
            done = Path(plan["done"])
            if not done.exists():
                done.write_text(str(os.getpid()))
                os._exit(1)


def dies_once_cnn(*, input_shape, num_classes):
    return DiesOnce(small_cnn(input_shape=input_shape, num_classes=num_classes))


WORKER_ENV = Path(tempfile.gettempdir()) / "feedline-test-worker-env.json"


class KillsController(AtStep):
    """SIGKILLs Ray Train's controller process (as the OOM killer would) at rank 0's second
    training step: the controller dies without removing its worker group's placement group.
    Before, it writes the worker's environment to ``WORKER_ENV``."""

    def at(self, rank, step):
        if rank != 0 or step != 2:
            return
        WORKER_ENV.write_text(json.dumps(dict(os.environ)))
        for proc in Path("/proc").iterdir():
            try:
                title = (proc / "cmdline").read_bytes()
            except OSError:
                continue
            if title.startswith(b"ray::TrainController"):
                os.kill(int(proc.name), 9)


def kills_controller_cnn(*, input_shape, num_classes):
    return KillsController(small_cnn(input_shape=input_shape, num_classes=num_classes))
