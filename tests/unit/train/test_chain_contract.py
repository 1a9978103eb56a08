"""Every stage of the feed chain passes the iterator contract (tests/unit/iterator_contract.py):
recording into the cache (in memory and in files), skipping a resumed epoch's ids, and the
chain composed as a rank runs it (shard → cache → skip → device feeder), streamed and resumed."""

import tempfile

import numpy as np

from pipeline.train.cache import CacheDecision, SampleCache
from pipeline.train.chain import FeedChain, FeedSpec, _without
from pipeline.train.reshuffle import replay
from pipeline.transfer.config import TransferConfig
from tests.unit.iterator_contract import IteratorContract, assert_same_batch, mixed_column_batch

FEEDER_HINT = "raised in the producer thread while reading batch 3 from the source"


class TestRecordInMemoryContract(IteratorContract):
    columns_only = True
    where_hint = "in record"

    def cache(self) -> SampleCache:
        return SampleCache(CacheDecision("memory", "test"))

    def build(self, source):
        return self.cache().record(source)

    def test_a_recorded_pass_replays_every_row_bit_equal(self):
        cache = self.cache()
        assert len(list(cache.record(mixed_column_batch(i) for i in range(5)))) == 5
        assert cache.complete and cache.rows == 30
        for i, batch in enumerate(cache.replay(batch_size=6)):
            assert_same_batch(mixed_column_batch(i), batch, np.asarray, f"replayed batch {i}")


class TestRecordInFilesContract(TestRecordInMemoryContract):
    """The shared-memory and disk caches: columns in ``.npy`` files a peer rank maps."""

    def cache(self) -> SampleCache:
        return SampleCache(CacheDecision("disk", "test"), directory=tempfile.mkdtemp())


class TestSkipContract(IteratorContract):
    """Skipping ids no batch holds changes nothing (the contract); skipping some removes exactly
    those rows and drops a batch left empty."""

    columns_only = True
    where_hint = "in _without"

    def build(self, source):
        return _without(source, np.array([-1, 10**9]))

    def test_skipped_ids_leave_and_an_emptied_batch_goes(self):
        batches = [{"id": np.array([0, 1, 2]), "x": np.array([0.0, 1.0, 2.0])},
                   {"id": np.array([3, 4]), "x": np.array([3.0, 4.0])}]
        out = list(_without(iter(batches), np.array([1, 3, 4])))
        assert len(out) == 1
        assert out[0]["id"].tolist() == [0, 2] and out[0]["x"].tolist() == [0.0, 2.0]

    def test_a_replayed_batch_loses_its_skipped_rows_too(self):
        columns = [{"id": np.arange(10), "x": np.arange(10) * 2.0}]
        replayed = replay(columns, np.array([7, 1, 4, 9, 0, 2]), batch_size=3)
        out = list(_without(replayed, np.array([4, 9])))
        assert [b["id"].tolist() for b in out] == [[1, 7], [0, 2]]
        assert [np.asarray(b["x"]).tolist() for b in out] == [[2.0, 14.0], [0.0, 4.0]]


class Shard:
    """A Ray Data shard's ``iter_batches``: the contract's source, once."""

    def __init__(self, source):
        self.source = source

    def iter_batches(self, **kwargs):
        return self.source


def chain(source) -> FeedChain:
    """The chain of a user's columns (no uint8 images to normalise on the device: the values
    arrive as they left)."""
    spec = FeedSpec(field="x", batch_size=4, seed=0, transfer=TransferConfig(ship_uint8=False),
                    normalize=None)
    return FeedChain(spec, Shard(source), device="cpu",
                     cache=SampleCache(CacheDecision("memory", "test")))


class TestStreamedEpochContract(IteratorContract):
    """A streamed epoch as ``Worker.epoch`` reads it: recorded into the cache, then moved to
    the device by the feeder."""

    columns_only = True
    where_hint = FEEDER_HINT

    def build(self, source):
        return chain(source).epoch(0)


class TestResumedEpochContract(IteratorContract):
    """A resumed epoch: the ids trained before the restart are skipped, nothing is recorded."""

    columns_only = True
    where_hint = FEEDER_HINT

    def build(self, source):
        return chain(source).epoch(0, skip=np.array([-1]))
