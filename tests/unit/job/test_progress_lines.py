"""An epoch's line waits for its validation, and is kept when validation never comes: the
checkpoint is saved before validation, so a run stopped there has trained that epoch."""

import json

import numpy as np
from rich.console import Console

from pipeline.job.progress import ProgressMonitor
from pipeline.messages import EpochClosed
from tests.unit.job.test_delivered import epoch_record


def monitor(tmp_path, epochs=3):
    return ProgressMonitor(None, epochs=epochs, samples_per_epoch=4, world_size=2,
                           metrics_path=tmp_path / "metrics.jsonl",
                           console=Console(file=open(tmp_path / "console", "w")), show=False,
                           delivered_dir=tmp_path / "delivered")


def lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


def report(mon, epoch):
    for rank in (0, 1):
        mon._on_epoch(epoch_record(epoch, rank, np.arange(2) + 2 * rank))


def test_the_line_carries_validation_whichever_message_comes_first(tmp_path):
    mon = monitor(tmp_path)
    report(mon, 1)
    assert lines(tmp_path) == [] and (tmp_path / "delivered/e1.npz").exists()  # ids kept now
    mon._on_closed(EpochClosed(epoch=1, metrics={"val_accuracy": 0.75}, ended_at=12.5))
    # rank 0's validation can reach the driver before a peer's report of the same epoch
    mon._on_epoch(epoch_record(2, 0, np.arange(2)))
    mon._on_closed(EpochClosed(epoch=2, metrics={"val_accuracy": 0.8}, ended_at=20.0))
    assert len(lines(tmp_path)) == 1
    mon._on_epoch(epoch_record(2, 1, np.arange(2) + 2))
    got = lines(tmp_path)
    assert [(x["epoch"], x["val_accuracy"], x["ended_at"]) for x in got] == [(1, 0.75, 12.5),
                                                                              (2, 0.8, 20.0)]
    assert mon.epoch_metrics == got
    assert "epoch 2/3  loss 0.5000" in (tmp_path / "console").read_text()


def test_an_epoch_whose_validation_never_came_keeps_its_line_in_order(tmp_path):
    mon = monitor(tmp_path)
    mon._on_epoch(epoch_record(1, 0, np.arange(2)))
    assert mon.last_epoch == 0  # the epoch a stop keeps: not until every rank reported it
    report(mon, 1)  # a restart during epoch 1's validation: the group resumes at epoch 2
    assert mon.last_epoch == 1
    report(mon, 2)
    mon._on_closed(EpochClosed(epoch=2, metrics={"val_accuracy": 0.5}, ended_at=3.0))
    report(mon, 3)  # stopped during epoch 3's validation
    assert [x["epoch"] for x in lines(tmp_path)] == [1, 2]
    mon.close_lines()
    got = lines(tmp_path)
    assert [x["epoch"] for x in got] == [1, 2, 3]
    assert ["val_accuracy" in x for x in got] == [False, True, False]
