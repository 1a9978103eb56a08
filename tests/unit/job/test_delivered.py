"""A stopped run's finished epochs are kept as they end, and its rerun accounts for them all."""

import numpy as np
from rich.console import Console

from pipeline.job.delivered import merge_earlier, save_epoch, write_delivered
from pipeline.job.progress import ProgressMonitor
from pipeline.messages import EpochDone


def ids(*values):
    return np.asarray(values, np.int64)


def epoch_record(epoch: int, rank: int, seen) -> EpochDone:
    """The message a Train worker sends at the end of an epoch (pipeline.train.loop)."""
    return EpochDone(rank=rank, epoch=epoch, ids=seen, rank_samples=len(seen), rank_seconds=1.0,
                     transfer={}, line={"epoch": epoch, "samples_per_second": 10.0,
                                        "train_loss": 0.5, "epoch_seconds": 1.0})


def test_an_epoch_is_kept_once_every_rank_finished_it(tmp_path):
    monitor = ProgressMonitor(None, epochs=3, samples_per_epoch=4, world_size=2,
                              metrics_path=tmp_path / "metrics.jsonl",
                              console=Console(file=open(tmp_path / "console", "w")), show=False,
                              delivered_dir=tmp_path / "delivered")
    monitor._on_epoch(epoch_record(1, 0, ids(3, 1)))
    assert not (tmp_path / "delivered").exists()  # rank 1 has not finished epoch 1
    monitor._on_epoch(epoch_record(1, 1, ids(0, 2)))
    with np.load(tmp_path / "delivered/e1.npz") as kept:
        assert sorted(kept.files) == ["rank0", "rank1"]
        assert kept["rank0"].tolist() == [3, 1] and kept["rank1"].tolist() == [0, 2]


def test_a_rerun_merges_the_epochs_only_the_stopped_run_finished(tmp_path):
    folder = tmp_path / "delivered"
    # the stopped run finished epochs 1 and 2 (epoch 2 resumed after a restart) ...
    save_epoch(folder, 1, {0: ids(0, 1), 1: ids(2, 3)}, None)
    save_epoch(folder, 2, {0: ids(9)}, ids(8))
    # ... but was stopped before epoch 2's checkpoint: the rerun trains epoch 2 again, then 3
    mine = {2: {0: ids(1, 0), 1: ids(3, 2)}, 3: {0: ids(2, 1), 1: ids(0, 3)}}
    delivered, before = merge_earlier(folder, 3, mine, {})
    assert list(delivered) == [1, 2, 3]
    assert delivered[1][0].tolist() == [0, 1] and delivered[1][1].tolist() == [2, 3]
    assert delivered[2] is mine[2] and before == {}  # the rerun's epoch 2 wins, whole

    write_delivered(tmp_path / "delivered.npz", delivered, before)
    with np.load(tmp_path / "delivered.npz") as out:
        assert sorted(out.files) == ["e1_rank0", "e1_rank1", "e2_rank0", "e2_rank1",
                                     "e3_rank0", "e3_rank1"]


def test_ids_committed_before_a_restart_come_along_and_extra_epochs_stay_out(tmp_path):
    folder = tmp_path / "delivered"
    save_epoch(folder, 1, {0: ids(5, 6)}, ids(1, 2, 3))
    save_epoch(folder, 4, {0: ids(7)}, None)  # a run with more epochs into the same directory
    (folder / ".e2.npz").write_bytes(b"half written")  # a stop while saving: not an epoch
    delivered, before = merge_earlier(folder, 3, {2: {0: ids(1)}}, {2: ids(4)})
    assert list(delivered) == [1, 2]
    assert before[1].tolist() == [1, 2, 3] and before[2].tolist() == [4]
