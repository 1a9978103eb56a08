"""A task of the integration tests' own, handed to ``pipeline.run(task=...)`` and pickled to the
Train workers (this module is importable there: the tests package sits beside pipeline)."""

import os
import time
from pathlib import Path

import torch
import torch.nn.functional as F

from pipeline import ClassificationTask, Task
from pipeline.train.task import inputs

OFFSET = 10.0


class OffsetTask(ClassificationTask):
    """Cross-entropy plus a constant: the same gradients, a train_loss no built-in task reports;
    and one more validation count, summed over both ranks."""

    def loss(self, model, batch):
        return F.cross_entropy(model(inputs(batch)), batch["label"]) + OFFSET

    def eval_counts(self, model, batch):
        counts = super().eval_counts(model, batch)
        counts["labels"] = batch["label"].sum()
        return counts

    def eval_metrics(self, totals):
        return super().eval_metrics(totals) | {"val_label_sum": totals.get("labels", 0.0)}


class FirstValidationWaits(ClassificationTask):
    """Classification whose first validation pass waits a minute once it has written the file
    ``$FEEDLINE_TEST_MARK``: a window for a test's Ctrl-C during validation. A rerun (the file
    there) validates at once."""

    def eval_counts(self, model, batch):
        mark = Path(os.environ["FEEDLINE_TEST_MARK"])
        if not mark.exists():
            mark.write_text("validating\n")
            time.sleep(60)
        return super().eval_counts(model, batch)


class PositionTask(Task):
    """For rows of ``x`` (float32 [4]) whose first value is the row's position in the dataset
    and ``label``: a linear classifier, and a loss that fails the run when a row's id is not its
    position (the ids Feedline assigned)."""

    def build_model(self, ctx):
        return torch.nn.Linear(ctx.input_shape[0] - 1, ctx.num_classes)  # the position: no feature

    def loss(self, model, batch):
        position = batch["x"][:, 0].long()
        if not torch.equal(position, batch["id"]):
            raise AssertionError(f"ids {batch['id'][:5].tolist()} are not the rows' positions "
                                 f"{position[:5].tolist()}")
        return F.cross_entropy(model(batch["x"][:, 1:]), batch["label"])


class DivergingTask(ClassificationTask):
    """Cross-entropy until a worker's ``after``-th step, NaN from there on (as a learning rate
    far too high ends): the run must stop as diverged, not end ``succeeded``."""

    def __init__(self, after: int):
        self.after = after
        self.steps = 0  # per Train worker: each has its own copy of the task

    def loss(self, model, batch):
        self.steps += 1
        loss = super().loss(model, batch)
        return loss * float("nan") if self.steps > self.after else loss
