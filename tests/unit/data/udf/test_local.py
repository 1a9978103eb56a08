from dataclasses import replace

import numpy as np
import pyarrow as pa
import pytest

from pipeline.data import ReaderSpec
from pipeline.data.config import DataConfig, ParquetSource
from pipeline.data.dataset import plan_source
from pipeline.data.sources import plan_image_folder
from pipeline.data.udf.local import RankSlices, rebatch
from tests.unit.data.conftest import write_folder
from tests.unit.data.udf.test_reader import Sink

SPEC = ReaderSpec(kind="image", origin="t", image_size=(10, 12), channels=3)


def ids_of(batches):
    return [int(i) for b in batches for i in b["id"]]


@pytest.mark.parametrize("world", [1, 2, 3, 7])
def test_the_ranks_slices_hold_every_row_once_and_bad_files_are_quarantined(tmp_path, world):
    folder = write_folder(tmp_path / "images", per_class=5)
    (folder / "cat" / "3.png").write_bytes(b"this is not a png")
    slices = RankSlices(plan_image_folder(folder).manifest, SPEC, decode_batch_size=2)
    sink = Sink()
    scored = []
    for rank in range(world):
        shard = slices.shard(rank, world, quarantine=sink)
        assert abs(shard.rows - 10 / world) < 1
        for _ in range(2):  # a second pass (next epoch, no cache) reads the same rows again
            batches = list(shard.iter_batches(batch_size=3, prefetch_batches=2))
            assert all(len(b["id"]) == 3 for b in batches[:-1])
            assert all(b["image"].shape[1:] == (3, 10, 12) for b in batches)
        scored += ids_of(batches)
    bad = [r["id"] for r in sink.records]
    assert bad == [3, 3]  # once a pass
    assert sorted(scored) == [i for i in range(10) if i != 3]


def test_a_shard_refuses_what_it_cannot_do(tmp_path):
    folder = write_folder(tmp_path / "images")
    shard = RankSlices(plan_image_folder(folder).manifest, SPEC, 4).shard(0, 1)
    with pytest.raises(ValueError, match="local_shuffle_buffer_size=16"):
        shard.iter_batches(batch_size=4, local_shuffle_buffer_size=16)
    with pytest.raises(ValueError, match="batch_format='pandas'"):
        shard.iter_batches(batch_size=4, batch_format="pandas")


def test_rebatch_keeps_every_row_in_order_across_uneven_batches():
    sizes = [5, 0, 1, 7, 2, 11]  # 26 rows
    start = np.cumsum([0, *sizes])
    batches = [{"id": np.arange(a, a + n), "x": np.arange(a, a + n) * 2.0}
               for a, n in zip(start[:-1], sizes, strict=True)]
    out = list(rebatch(batches, 4))
    assert [len(b["id"]) for b in out] == [4] * 6 + [2]
    np.testing.assert_array_equal(np.concatenate([b["id"] for b in out]), np.arange(26))
    np.testing.assert_array_equal(np.concatenate([b["x"] for b in out]), np.arange(26) * 2.0)
    assert list(rebatch([], 4)) == []


def test_a_table_sources_slices_split_its_row_groups(tmp_path):
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    for part in range(4):
        pq.write_table(pa.table({"f0": rng.normal(size=25), "label": np.arange(25) % 2}),
                       tmp_path / f"part{part}.parquet")
    config = DataConfig(source=ParquetSource(path=str(tmp_path)), val_fraction=0.3)
    plan, spec = plan_source(config)
    want_val = replace(spec, keep_ids=(config.val_fraction, config.seed, True))
    slices = RankSlices(plan.manifest, want_val, decode_batch_size=1)  # a row group at a time
    scored = [ids_of(slices.shard(rank, 2).iter_batches(batch_size=8)) for rank in range(2)]
    assert all(scored)  # each rank read row groups of its own
    every = [i for ids in scored for i in ids]
    assert len(every) == len(set(every)) and 15 <= len(every) <= 45  # ~30 of 100
