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


def write_position_rows(folder, files=3, rows=200):
    """Parquet files of rows (position, a, b, c, label), ``position`` counting the rows over
    the files in name order; the rows' count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        a, b, c = rng.normal(size=(3, rows))
        pq.write_table(pa.table({"position": np.arange(f * rows, (f + 1) * rows), "a": a, "b": b,
                                 "c": c, "label": (b > 0).astype(np.int64)}),
                       folder / f"part-{f}.parquet")
    return files * rows


def _stack(batch):
    import numpy as np

    x = np.stack([batch[k] for k in ("position", "a", "b", "c")], axis=1).astype(np.float32)
    return {"x": x, "label": batch["label"]}


def position_rows(path):
    """``data.source.function`` of the tests: the rows under ``path`` as a Ray Dataset of
    ``x`` (float32 [4], position first) and ``label``, as a user builds one."""
    import ray.data

    return ray.data.read_parquet(path).map_batches(_stack, batch_format="numpy")


def _drop_last_feature(batch):
    return {"x": batch["x"][:, :-1], "label": batch["label"]}


def narrower_rows(path):
    """:func:`position_rows` with one feature fewer per row: a validation set built by another
    script than the training set's."""
    return position_rows(path).map_batches(_drop_last_feature, batch_format="numpy")



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


def _ragged(batch):
    import numpy as np

    x = np.empty(len(batch["x"]), dtype=object)
    for i, row in enumerate(batch["x"]):
        x[i] = row[: 2 + i % 2]  # rows of 2 and 3 features
    return {"x": x, "label": batch["label"]}


def _fails_on_row_7(batch):
    if 7 in batch["x"][:, 0]:
        raise ValueError("cannot parse row 7: 'n/a' is not a number")
    return batch


def broken_rows(path, how):
    """:func:`position_rows` broken as users break theirs: ``ragged`` rows, ``empty`` (a filter
    that drops every row), or a map that ``raises`` on one row."""
    ds = position_rows(path)
    if how == "ragged":
        return ds.map_batches(_ragged, batch_format="numpy")
    if how == "empty":
        return ds.filter(lambda row: row["label"] > 5)
    return ds.map_batches(_fails_on_row_7, batch_format="numpy")
