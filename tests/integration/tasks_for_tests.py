"""A task of the integration tests' own, handed to ``pipeline.run(task=...)`` and pickled to the
Train workers (this module is importable there: the tests package sits beside pipeline)."""

import torch.nn.functional as F

from pipeline import ClassificationTask
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
