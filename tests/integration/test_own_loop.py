"""A hand-written Ray Train loop on Feedline's batches (``examples/own_loop.py``, run as it is):
``pipeline.prepare`` builds the datasets, ``pipeline.batches`` feeds the user's loop, and every
epoch's ids come back exactly once."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location("own_loop", ROOT / "examples" / "own_loop.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.timeout(300)
def test_a_hand_written_train_loop_gets_every_sample_once_per_epoch(ray_cluster, tmp_path):
    rows = load_example().main(epochs=2, output=str(tmp_path))
    assert [r["epoch"] for r in rows] == [1, 2]
    for row in rows:  # two epochs: the second starts the readers again
        assert (row["lost"], row["duplicated"], row["unknown"]) == (0, 0, 0), row
        assert row["unique"] + len(row["split_remainder"]) == row["expected"] == 1434, row
    ranks = sorted(p.name for p in (tmp_path / "ids").iterdir())
    assert ranks == ["e1_rank0.npy", "e1_rank1.npy", "e2_rank0.npy", "e2_rank1.npy"]

