"""The decoded-sample cache: what it decides, and that a replay gives back exactly the rows."""

import numpy as np
import pytest

from pipeline.train.cache import CacheDecision, SampleCache, decide

MiB = 2**20


def batches(n: int, batch: int = 7, shape=(3, 4, 4)):
    """Host batches shaped like Ray Data's numpy batches of decoded uint8 images."""
    for start in range(0, n, batch):
        ids = np.arange(start, min(n, start + batch), dtype=np.int64)
        yield {"id": ids, "label": (ids % 3).astype(np.int64),
               "image": np.broadcast_to((ids % 251).astype(np.uint8)[:, None, None, None],
                                        (len(ids), *shape)).copy()}


@pytest.mark.parametrize("requested, shard, memory, disk, mode", [
    ("auto", 10 * MiB, 100 * MiB, 10**12, "memory"),
    ("auto", 200 * MiB, 100 * MiB, 10**12, "disk"),
    ("auto", 200 * MiB, 100 * MiB, 300 * MiB, "off"),  # disk must keep half free
    ("off", 1, 100 * MiB, 10**12, "off"),
    ("memory", 200 * MiB, 100 * MiB, 0, "memory"),  # asked for: the user's call
    ("disk", 1, 100 * MiB, 10**12, "disk"),
])
def test_decide(requested, shard, memory, disk, mode):
    decision = decide(requested, shard_bytes=shard, memory_budget=memory, disk_free=disk)
    assert decision.mode == mode
    assert decision.reason  # always says why


def test_decide_rejects_an_unknown_mode():
    with pytest.raises(ValueError, match=r"data.cache \('ram'\) must be one of"):
        decide("ram", shard_bytes=1, memory_budget=1, disk_free=1)


@pytest.mark.parametrize("mode", ["memory", "disk"])
def test_replay_gives_back_every_recorded_row_in_order(mode, tmp_path):
    cache = SampleCache(CacheDecision(mode, "test"), directory=tmp_path / "c")
    seen = list(cache.record(batches(2500)))  # grows past its first capacity (1024 rows)
    assert cache.complete and cache.rows == 2500
    recorded = {k: np.concatenate([b[k] for b in seen]) for k in seen[0]}
    replayed = list(cache.replay(batch_size=64))
    assert [len(b["id"]) for b in replayed] == [64] * 39 + [4]  # no rows past the end
    for key, value in recorded.items():
        np.testing.assert_array_equal(np.concatenate([b[key] for b in replayed]), value)
    if mode == "disk":
        assert sorted(p.suffix for p in (tmp_path / "c").iterdir()) == [".npy"] * 3


def test_a_pass_cut_short_leaves_no_cache():
    cache = SampleCache(CacheDecision("memory", "test"))
    stream = cache.record(batches(100))
    next(stream)
    stream.close()  # the consumer stopped early (an error, a stall)
    assert not cache.complete and cache.rows == 0
    with pytest.raises(RuntimeError, match="before a complete recorded pass"):
        next(cache.replay(batch_size=8))


def test_discard_forgets_rows_and_deletes_the_disk_files(tmp_path):
    cache = SampleCache(CacheDecision("disk", "test"), directory=tmp_path / "c")
    list(cache.record(batches(50)))
    assert (tmp_path / "c").exists()
    cache.discard()
    assert not cache.complete and not (tmp_path / "c").exists()


def test_auto_drops_a_disk_cache_slower_than_the_stream(tmp_path, monkeypatch):
    cache = SampleCache(CacheDecision("disk", "auto: test"), directory=tmp_path / "c", auto=True)
    monkeypatch.setattr(cache, "_read_back_s", lambda: 1e9)  # a disk slower than decoding
    list(cache.record(batches(50)))
    assert cache.decision.mode == "off" and "not faster" in cache.decision.reason
    assert not cache.complete and not (tmp_path / "c").exists()


def test_a_cache_dropped_without_discard_removes_its_files(tmp_path):
    """A loop that raised (a diverged run, a stall) never discards: a memory cache's files in
    /dev/shm would hold RAM until reboot."""
    import gc

    cache = SampleCache(CacheDecision("memory", "test"), directory=tmp_path / "c")
    list(cache.record(batches(50)))
    assert (tmp_path / "c").is_dir()
    del cache
    gc.collect()
    assert not (tmp_path / "c").exists()
