"""Tasks for the unit tests, importable by name (``train.task: tests.unit.train.tasks:...``).

Their losses are known functions of the batch, so a test can say what a step must do.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline import ClassificationTask, Task


class CountingSGD(torch.optim.SGD):
    """Plain SGD (no momentum) that counts its steps: the optimizer a task chose."""

    def __init__(self, params, lr: float):
        super().__init__(params, lr=lr)
        self.steps = 0

    def step(self, closure=None):
        self.steps += 1
        return super().step(closure)


class WeightedSumTask(Task):
    """``loss = Σ_i label_i · Σ_j (W x_i + b)_j``: its gradient does not depend on the weights
    (``dW[j] = Σ_i label_i x_i``, ``db[j] = Σ_i label_i``), so every update is known."""

    def build_model(self, ctx):
        torch.manual_seed(0)
        return nn.Linear(ctx.input_shape[0], ctx.num_classes)

    def configure_optimizer(self, model, ctx):
        return CountingSGD(model.parameters(), lr=ctx.train.lr)

    def loss(self, model, batch):
        return (model(batch["features"]).sum(dim=1) * batch["label"].float()).sum()


class RecordingClassification(ClassificationTask):
    """The built-in task, noting the dtype its logits had (autocast) and the batches it saw."""

    def __init__(self):
        self.logit_dtypes: list[torch.dtype] = []
        self.batches = 0

    def loss(self, model, batch):
        logits = model(batch["image"] if "image" in batch else batch["features"])
        self.logit_dtypes.append(logits.dtype)
        self.batches += 1
        return nn.functional.cross_entropy(logits, batch["label"])


class DuckTask:
    """Subclasses nothing: a model and a loss; Task's defaults do the rest."""

    def build_model(self, ctx):
        return nn.Linear(ctx.input_shape[0], ctx.num_classes)

    def loss(self, model, batch):
        return model(batch["features"]).square().mean()


class NoLoss:
    """Not a task: it builds a model but has no loss."""

    def build_model(self, ctx):
        return nn.Linear(ctx.input_shape[0], ctx.num_classes)


def needs_arguments(size):
    return WeightedSumTask()


class LegacyTask(ClassificationTask):
    """Written for the old signatures (the whole config): still called so, this release."""

    def __init__(self):
        self.seen = {}

    def build_model(self, *, input_shape, num_classes, config):
        self.seen["build_model"] = config
        return super().build_model(input_shape=input_shape, num_classes=num_classes,
                                   config=config)

    def configure_optimizer(self, model, config):
        self.seen["configure_optimizer"] = config
        return torch.optim.SGD(model.parameters(), lr=config.train.lr)

    def configure_scheduler(self, optimizer, config, total_steps):
        self.seen["configure_scheduler"] = (config, total_steps)
        return None
