"""User model factories for the integration tests (``train.model: module:factory``)."""

import json
import os
import tempfile
import time
from pathlib import Path

import torch.distributed as dist
from torch import nn

from pipeline.train.models import small_cnn


class Sleepy(nn.Module):
    """Wraps a model and sleeps in forward: a compute step the data path can easily feed."""

    def __init__(self, inner: nn.Module, seconds: float, only_rank: int | None = None):
        super().__init__()
        self.inner, self.seconds, self.only_rank = inner, seconds, only_rank

    def forward(self, x):
        rank = dist.get_rank() if dist.is_initialized() else 0
        if self.only_rank is None or rank == self.only_rank:
            time.sleep(self.seconds)
        return self.inner(x)


def slow_cnn(*, input_shape, num_classes):
    return Sleepy(small_cnn(input_shape=input_shape, num_classes=num_classes), 0.08)


def slow_rank_one_cnn(*, input_shape, num_classes):
    return Sleepy(small_cnn(input_shape=input_shape, num_classes=num_classes), 0.08, only_rank=1)


KILL_PLAN = Path(tempfile.gettempdir()) / "feedline-test-train-kill.json"


class DiesOnce(nn.Module):
    """Kills its Train worker (``os._exit``) at a planned training step, on the first attempt."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.steps = inner, 0

    def forward(self, x):
        if self.training:
            self.steps += 1
            plan = json.loads(KILL_PLAN.read_text()) if KILL_PLAN.exists() else None
            rank = dist.get_rank() if dist.is_initialized() else 0
            if plan and rank == plan["rank"] and self.steps == plan["step"]:
                done = Path(plan["done"])
                if not done.exists():
                    done.write_text(str(os.getpid()))
                    os._exit(1)
        return self.inner(x)


def dies_once_cnn(*, input_shape, num_classes):
    return DiesOnce(small_cnn(input_shape=input_shape, num_classes=num_classes))
