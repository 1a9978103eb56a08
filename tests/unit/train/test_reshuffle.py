"""Every replayed epoch deals all cached rows anew across the ranks, as DistributedSampler does:
the pure dealing, the groups ``data.reshuffle`` names, and two ranks' real cache files read
through the feed chain over several epochs."""

import numpy as np
import pytest

from pipeline.train.cache import CacheDecision, SampleCache
from pipeline.train.chain import FeedChain, FeedSpec
from pipeline.train.reshuffle import (
    Shard,
    epoch_order,
    global_needs_streaming,
    group_of,
    replay,
)
from pipeline.transfer.config import TransferConfig
from tests.unit.train.test_cache import batches


@pytest.mark.parametrize("world, rows", [(1, 10), (2, 717), (4, 256), (8, 1000)])
def test_each_epoch_deals_every_row_once_in_equal_shares(world, rows):
    counts = [rows] * world
    orders = {e: [epoch_order(counts, k, seed=3, epoch=e) for k in range(world)]
              for e in range(3)}
    for mine in orders.values():
        assert sorted(np.concatenate(mine).tolist()) == list(range(rows * world))
        assert {len(m) for m in mine} == {rows}  # DDP steps stay in lockstep
    if rows * world > 1:  # a new deal every epoch, the same one for the same (seed, epoch)
        assert not np.array_equal(orders[0][0], orders[1][0])
        assert np.array_equal(orders[1][0], epoch_order(counts, 0, seed=3, epoch=1))
        assert not np.array_equal(orders[1][0], epoch_order(counts, 0, seed=4, epoch=1))


def test_a_rank_trains_about_a_world_share_of_its_own_rows_each_epoch():
    """What the fix is for: before, rank 0 trained its same 717 rows every epoch."""
    world, rows = 2, 717
    mine = epoch_order([rows] * world, 0, seed=0, epoch=1)
    own = np.sum(mine < rows) / rows
    assert 0.4 < own < 0.6, own


def shards(hosts, rows=100, files=True):
    return [Shard(rank=r, host=h, rows=rows, files={"id": f"/x/{r}.npy"} if files else {})
            for r, h in enumerate(hosts)]


def test_groups_follow_the_scope_and_the_machines():
    two_machines = shards(["a", "a", "b", "b"])
    assert group_of("global", shards(["a"] * 4), 2).ranks == (0, 1, 2, 3)
    assert group_of("node", two_machines, 2).ranks == (2, 3)
    assert group_of("node", two_machines, 1).ranks == (0, 1)
    assert group_of("rank", two_machines, 3).ranks == (3,)
    # every rank of a group finds the same group
    assert {group_of("global", shards(["a"] * 4), r).ranks for r in range(4)} == {(0, 1, 2, 3)}


def test_groups_fall_back_to_each_rank_with_the_reason():
    unshared = group_of("global", shards(["a", "a"], files=False), 0)
    assert unshared.ranks == (0,) and "process memory" in unshared.reason
    uneven = [Shard(0, "a", 100, {"id": "x"}), Shard(1, "a", 99, {"id": "y"})]
    fallback = group_of("global", uneven, 1)
    assert fallback.ranks == (1,) and "[99, 100]" in fallback.reason
    with pytest.raises(ValueError, match=r"data.reshuffle \('all'\) must be one of global"):
        group_of("all", uneven, 0)


def test_global_across_machines_streams_instead_of_moving_cached_rows():
    assert global_needs_streaming("global", ["a", "a"]) is None
    assert global_needs_streaming("node", ["a", "b"]) is None
    reason = global_needs_streaming("global", ["a", "b", "b"])
    assert "2 machines" in reason and "data.reshuffle: node" in reason


def test_replay_gathers_each_batch_from_every_shard():
    columns = [{"id": np.arange(0, 50), "x": np.arange(0, 50) * 10},
               {"id": np.arange(50, 100), "x": np.arange(50, 100) * 10}]
    order = np.random.default_rng(0).permutation(100)[:60]
    got = list(replay(columns, order, batch_size=16))
    assert [len(b["id"]) for b in got] == [16, 16, 16, 12]
    # each field is the gather's plan (the feeder runs it into staging); read, it is an array
    ids = np.concatenate([np.asarray(b["id"]) for b in got])
    assert sorted(ids.tolist()) == sorted(order.tolist())
    for b in got:
        np.testing.assert_array_equal(np.asarray(b["x"]), np.asarray(b["id"]) * 10)


class Shard_:
    """Stands where Ray Train's ``get_dataset_shard`` is: ``iter_batches`` over numpy batches
    shaped as Ray Data's (``id``, ``label``, uint8 ``image``), here one rank's fixed rows."""

    def __init__(self, first: int, n: int):
        self.first, self.n, self.passes = first, n, 0

    def iter_batches(self, *, batch_size, **_):
        self.passes += 1
        for b in batches(self.n, batch=batch_size):
            b["id"] = b["id"] + self.first
            b["label"] = b["id"] % 3
            b["image"][:] = (b["id"] % 251).astype(np.uint8)[:, None, None, None]
            yield b


@pytest.mark.parametrize("scope", ["global", "rank"])
def test_two_ranks_share_their_cache_files_and_every_epoch_deals_them_anew(tmp_path, scope):
    rows, world, epochs = 300, 2, 4
    spec = FeedSpec(field="image", batch_size=32, seed=0, normalize=None, reshuffle=scope,
                    transfer=TransferConfig(ship_uint8=False))
    sources = [Shard_(r * rows, rows) for r in range(world)]
    chains = [FeedChain(spec, sources[r], device="cpu", rank=r,
                        cache=SampleCache(CacheDecision("memory", "test"),
                                          directory=tmp_path / f"train-rank{r}"))
              for r in range(world)]
    seen = {}
    for epoch in range(epochs):
        for rank, chain in enumerate(chains):
            with chain.epoch(epoch) as feeder:
                got = list(feeder)
            for b in got:  # every row keeps its own label and pixels
                np.testing.assert_array_equal(b["label"].numpy(), b["id"].numpy() % 3)
                np.testing.assert_array_equal(b["image"][:, 0, 0, 0].numpy(),
                                              b["id"].numpy() % 251)
            seen[epoch, rank] = np.concatenate([b["id"].numpy() for b in got])
        if epoch == 0:  # what the loop does once every rank's pass ended
            info = [c.shard_info("host-a") for c in chains]
            for chain in chains:
                chain.share(group_of(scope, info, chain.rank), info)
    assert [s.passes for s in sources] == [1, 1]  # later epochs replay, nothing streams
    for epoch in range(epochs):
        both = np.concatenate([seen[epoch, r] for r in range(world)])
        assert sorted(both.tolist()) == list(range(world * rows))  # exactly once per epoch
        assert len(seen[epoch, 0]) == len(seen[epoch, 1]) == rows
    for epoch in range(1, epochs):
        mine = seen[epoch, 0]
        assert not np.array_equal(mine, seen[epoch - 1, 0])  # a new order every epoch
        from_peer = np.mean(mine >= rows)
        if scope == "global":  # rows move between ranks
            assert 0.35 < from_peer < 0.65, from_peer
        else:
            assert from_peer == 0
    for chain in chains:
        chain.cache.discard()


def test_a_resumed_epoch_skips_the_trained_ids_and_records_nothing(tmp_path):
    spec = FeedSpec(field="image", batch_size=10, seed=0, normalize=None,
                    transfer=TransferConfig(ship_uint8=False))
    cache = SampleCache(CacheDecision("memory", "test"), directory=tmp_path / "c")
    chain = FeedChain(spec, Shard_(0, 45), device="cpu", cache=cache)
    trained = np.array([0, 1, 2, 17, 44])
    with chain.epoch(3, skip=trained) as feeder:
        ids = np.concatenate([b["id"].numpy() for b in feeder])
    assert sorted(ids.tolist()) == sorted(set(range(45)) - set(trained.tolist()))
    assert not chain.replays  # the next epoch streams and records a whole pass
    with chain.epoch(4) as feeder:
        list(feeder)
    assert chain.replays and cache.rows == 45
    cache.discard()
