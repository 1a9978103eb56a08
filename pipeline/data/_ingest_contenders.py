"""The four ways to turn the same image files into batches that the ingest benchmark compares.

Private to :mod:`pipeline.data.ingest_bench`. Every contender decodes with the very same
function, :class:`~pipeline.data.reader.SampleReader` (decode + resize + normalise), on the same
manifest, and yields batches of ``batch_size`` samples as dicts with an ``id`` column. Each is a
context manager around an iterator, so building the pipeline happens inside the timed region
and tear-down (actors, worker processes) happens before the next contender starts.

=============  =============================================================================
feedline       ``build_datasets`` (manifest blocks → ``map_batches(SampleReader,
               ActorPoolStrategy)``) → ``streaming_split(1)`` as Ray Train does →
               ``iter_batches(numpy, prefetch)`` → ``DeviceFeeder`` on ``cpu``: ``pipeline run``
raw_ray_data   ``from_items`` → ``map_batches(fn)`` with Ray's defaults →
               ``iter_torch_batches()``: what a Ray user writes first
dataloader     ``torch.utils.data.DataLoader(num_workers=N, persistent_workers=True)``; each
               worker decodes a whole batch (a ``BatchSampler``), the strongest DataLoader form
ceiling        ``SampleReader`` alone in N processes, at most 2N batches in flight; only ids
               and per-sample checksums come back, so nothing can deliver more
=============  =============================================================================
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.data.reader import ReaderSpec, SampleReader

Batch = dict[str, Any]


@dataclass(frozen=True)
class Workload:
    """What every contender gets: the same files, decode settings and batch size (driver)."""

    root: str
    manifest: pa.Table  # id, path, label: plan_image_folder(root).manifest
    spec: ReaderSpec
    batch_size: int
    workers: int
    timeout_s: float

    def columns(self) -> dict[str, np.ndarray]:
        # Fixed-width strings, not objects: forked workers touching Python objects would
        # copy-on-write the parent's pages and inflate their memory.
        return {"id": self.manifest.column("id").to_numpy(),
                "path": np.asarray(self.manifest.column("path").to_pylist(), dtype=str),
                "label": self.manifest.column("label").to_numpy()}

    def chunks(self) -> list[dict[str, np.ndarray]]:
        cols, step = self.columns(), self.batch_size
        return [{k: v[i:i + step] for k, v in cols.items()}
                for i in range(0, self.manifest.num_rows, step)]


# -- 1. Feedline, as `pipeline run` builds it -----------------------------------------------

def feedline_data_config(work: Workload):
    """The ``data`` section a user would write for these files; everything else is default."""
    from pipeline.data.config import DataConfig, ImageFolderSource

    spec = work.spec
    return DataConfig(source=ImageFolderSource(path=work.root), image_size=spec.image_size,
                      channels=spec.channels, mean=spec.mean, std=spec.std, val_fraction=0.0,
                      batch_size=work.batch_size, concurrency=(work.workers, work.workers),
                      stall_timeout_s=work.timeout_s)


@contextmanager
def feedline(work: Workload) -> Iterator[Iterator[Batch]]:
    from pipeline.data.dataset import build_datasets
    from pipeline.transfer import DeviceFeeder, TransferConfig

    config = feedline_data_config(work)
    transfer = TransferConfig()  # the defaults pipeline run uses: images ship as uint8
    plan = build_datasets(config, ship_uint8=transfer.ship_uint8)
    # Ray Train hands each worker a streaming_split shard, even with one worker.
    shard = plan.train.streaming_split(1, equal=True)[0]
    batches = shard.iter_batches(batch_size=work.batch_size, batch_format="numpy",
                                 prefetch_batches=config.prefetch_batches)
    uint8 = {"image": config.channel_stats()} if transfer.ship_uint8 else None
    with DeviceFeeder.from_config(batches, transfer, device="cpu", uint8_normalize=uint8,
                                  timeout_s=config.stall_timeout_s) as feeder:
        yield iter(feeder)


# -- 2. raw Ray Data with its defaults --------------------------------------------------------

def _decode(batch: Batch, spec: ReaderSpec) -> Batch:
    return SampleReader(spec)(batch)


@contextmanager
def raw_ray_data(work: Workload) -> Iterator[Iterator[Batch]]:
    import ray.data

    ds = ray.data.from_items(work.manifest.to_pylist())
    ds = ds.map_batches(_decode, fn_kwargs={"spec": work.spec})
    # Ray's iterators take no timeout; a hang here is Ray's, and shows as a stuck benchmark.
    yield iter(ds.iter_torch_batches(batch_size=work.batch_size))


# -- 3. torch DataLoader ------------------------------------------------------------------------

class _BatchDataset:
    """Map-style dataset indexed by a list of positions (one batch); picklable to workers."""

    def __init__(self, columns: dict[str, np.ndarray], spec: ReaderSpec):
        self.columns = columns
        self.reader = SampleReader(spec)

    def __len__(self) -> int:
        return len(self.columns["id"])

    def __getitem__(self, indices: list[int]) -> Batch:
        index = np.asarray(indices)
        return self.reader({k: v[index] for k, v in self.columns.items()})


@contextmanager
def dataloader(work: Workload) -> Iterator[Iterator[Batch]]:
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    dataset = _BatchDataset(work.columns(), work.spec)
    sampler = BatchSampler(SequentialSampler(range(len(dataset))), work.batch_size, False)
    loader = DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=work.workers,
                        persistent_workers=True, timeout=work.timeout_s)
    batches = iter(loader)
    try:
        yield batches
    finally:
        # persistent workers outlive the pass by design; stop them before the next contender
        batches._shutdown_workers()


# -- 4. the ceiling: the decode alone in N processes -------------------------------------------

_READER: SampleReader | None = None


def _init_worker(spec: ReaderSpec) -> None:
    global _READER
    _READER = SampleReader(spec)


def _decode_only(chunk: Batch) -> Batch:
    assert _READER is not None, "pool initializer did not run"
    out = _READER(chunk)
    image = out["image"]
    return {"id": out["id"], "label": out["label"],
            "checksum": image.reshape(len(image), -1).sum(axis=1, dtype=np.float64)}


@contextmanager
def ceiling(work: Workload) -> Iterator[Iterator[Batch]]:
    # An executor, not multiprocessing.Pool: its shutdown lets workers exit on their own,
    # where Pool's __exit__ SIGTERMs them (and Ray's inherited handler logs every one).
    with ProcessPoolExecutor(work.workers, mp_context=multiprocessing.get_context(),
                             initializer=_init_worker, initargs=(work.spec,)) as pool:
        yield _bounded(pool, work.chunks(), 2 * work.workers, work.timeout_s)


def _bounded(pool: ProcessPoolExecutor, chunks: list[Batch], window: int,
             timeout_s: float) -> Iterator[Batch]:
    """In order, at most ``window`` batches queued or decoding: memory stays bounded."""
    todo = iter(chunks)
    pending = collections.deque(pool.submit(_decode_only, chunk)
                                for chunk in itertools.islice(todo, window))
    while pending:
        result = pending.popleft().result(timeout=timeout_s)
        chunk = next(todo, None)
        if chunk is not None:
            pending.append(pool.submit(_decode_only, chunk))
        yield result


Contender = Callable[[Workload], AbstractContextManager[Iterator[Batch]]]

CONTENDERS: dict[str, Contender] = {
    "feedline": feedline,
    "raw_ray_data": raw_ray_data,
    "dataloader": dataloader,
    "ceiling": ceiling,
}
