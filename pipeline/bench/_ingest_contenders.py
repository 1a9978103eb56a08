"""The ways to turn the same JPEG files into batches that the ingest benchmark compares.

Private to :mod:`pipeline.bench.ingest`. Every contender gets the same work (:class:`Workload`):
the same files in the same order, decode + resize to ``image_size`` with PIL's bilinear filter,
uint8 CHW out (what Feedline ships), ``batch_size`` samples per consumer batch, ``workers``
decode processes or actors (one CPU each), ``prefetch`` batches ready ahead of the consumer.
Each is a context manager: entering builds the pipeline (inside the timed region); it yields a
function ``epoch(index) -> iterator of batches`` (with an optional ``status()`` that says what
the contender decided, e.g. the cache's mode); leaving tears everything down. A batch is a
dict with ``id`` and ``image`` (``batch x 3 x H x W`` uint8), or ``crc`` for the ceiling.

=================  ==========================================================================
feedline           ``data.cache: off``; ``build_datasets`` → ``streaming_split(1)`` (what Ray
                   Train hands a worker) → per epoch ``iter_batches(numpy)`` → ``DeviceFeeder``
                   on ``cpu``: :class:`pipeline.train.chain.FeedChain`, as the loop composes it.
                   Prefetch =
                   ``transfer.host_prefetch`` + ``transfer.gpu_prefetch``. The feeder gets no
                   ``uint8_normalize``: the batch stays uint8 like everyone's (normalising is
                   the step's device work, the same for all).
feedline_cache     the same with ``data.cache: auto`` (Feedline's default): epoch 1 streams
                   and records the uint8 samples, later epochs replay them, as the loop does
ray_data_tuned     ``from_items`` in blocks of Feedline's size → ``map_batches(Decoder,
                   ActorPoolStrategy(size=workers), batch_size)`` →
                   ``iter_torch_batches(prefetch_batches=prefetch)``: an expert's two lines
ray_data_defaults  ``from_items`` → ``map_batches(fn)`` → ``iter_torch_batches()``: Ray's defaults
=================  ==========================================================================

DataLoader and the ceiling live in :mod:`pipeline.bench._local_contenders`.
"""

from __future__ import annotations

import math
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

Batch = dict[str, Any]
Epochs = Callable[[int], Iterator[Batch]]
Contender = Callable[["Workload"], AbstractContextManager[Epochs]]


@dataclass(frozen=True)
class Workload:
    """What every contender gets (driver; pickles to workers): files, sizes and budgets."""

    root: str
    ids: np.ndarray  # int64, in Feedline's order (the manifest shuffled once with seed 0)
    paths: np.ndarray  # fixed-width str: forked workers touching objects would copy pages
    labels: np.ndarray
    image_size: tuple[int, int]
    batch_size: int
    rows_per_block: int  # Feedline's Ray Data block size, given to tuned Ray Data too
    workers: int  # decode processes/actors, one CPU each
    prefetch: int  # batches ready ahead of the consumer
    cores: int  # the machine's: the ceiling uses all of them
    timeout_s: float
    verify: bool = False  # the ceiling returns per-sample checksums (warm-up only)

    @property
    def samples(self) -> int:
        return len(self.ids)

    def rows(self) -> list[dict[str, Any]]:
        return [{"id": int(i), "label": int(y), "path": str(p)}
                for i, y, p in zip(self.ids, self.labels, self.paths, strict=True)]

    def chunks(self) -> list[tuple[np.ndarray, np.ndarray]]:
        step = self.batch_size
        return [(self.ids[i:i + step], self.paths[i:i + step])
                for i in range(0, self.samples, step)]


# -- the decode every baseline runs (Feedline's SampleReader makes the same bytes) ------------

def decode_batch(paths: Any, size: tuple[int, int]) -> np.ndarray:
    """JPEG files → ``len x 3 x H x W`` uint8: open, RGB, bilinear resize, channels first."""
    from PIL import Image

    height, width = size
    out = np.empty((len(paths), 3, height, width), np.uint8)
    for i, path in enumerate(paths):
        with Image.open(str(path)) as img:
            img = img.convert("RGB")
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            out[i] = np.asarray(img).transpose(2, 0, 1)
    return out


# -- Feedline, as a Train worker iterates it ------------------------------------------------------

def feedline_data_config(work: Workload, cache: str = "off"):
    """The ``data`` and ``transfer`` sections a user would write for these files; everything
    else is default (images ship as uint8, as in ``pipeline run``)."""
    from pipeline.data.config import DataConfig, ImageFolderSource
    from pipeline.transfer import TransferConfig

    host_prefetch = work.prefetch - TransferConfig().gpu_prefetch
    data = DataConfig(source=ImageFolderSource(path=work.root), image_size=work.image_size,
                      channels=3, mean=(0.5,), std=(0.5,), val_fraction=0.0,
                      decode_batch_size=work.batch_size,
                      concurrency=(work.workers, work.workers), cache=cache)
    return data, TransferConfig(host_prefetch=host_prefetch, stall_timeout_s=work.timeout_s)


@contextmanager
def feedline(work: Workload, cache: str = "off") -> Iterator[Epochs]:
    from dataclasses import replace

    from pipeline.data.dataset import build_datasets
    from pipeline.train.cache import available_memory, cache_dir, disk_free, rank_cache
    from pipeline.train.chain import FeedChain, FeedSpec

    config, transfer = feedline_data_config(work, cache)
    plan = build_datasets(config, ship_uint8=transfer.ship_uint8)
    # Ray Train hands each worker a streaming_split shard once; every epoch iterates it again.
    shard = plan.train.streaming_split(1, equal=True)[0]
    with tempfile.TemporaryDirectory(prefix="feedline-bench-cache-") as directory:
        # one rank's cache, sized as pipeline.train.loop._caches sizes it (world 1)
        samples = rank_cache(config.cache_mode, rows=work.samples,
                             per_sample=3 * work.image_size[0] * work.image_size[1] + 16,
                             world=1, budget=available_memory() * config.cache_memory_fraction,
                             free=disk_free(Path(directory)),
                             memory_dir=cache_dir("", "bench", "train", 0, memory=True),
                             disk_dir=Path(directory) / "train-rank0")
        # the chain pipeline run composes; the batch stays uint8 like everyone's
        spec = FeedSpec(field="image", batch_size=work.batch_size, seed=config.seed,
                        transfer=replace(transfer, ship_uint8=False), normalize=None)
        chain = FeedChain(spec, shard, device="cpu", cache=samples)

        def epoch(index: int) -> Iterator[Batch]:
            with chain.epoch(index) as feeder:
                yield from feeder

        epoch.status = samples.status  # type: ignore[attr-defined]  # what auto chose
        try:
            yield epoch
        finally:
            samples.discard()


@contextmanager
def feedline_cache(work: Workload) -> Iterator[Epochs]:
    """Feedline with ``data.cache: auto``, the default a user gets: epoch 1 streams and
    records, later epochs replay (see :mod:`pipeline.train.cache`)."""
    with feedline(work, cache="auto") as epoch:
        yield epoch


# -- raw Ray Data -----------------------------------------------------------------------------

class Decoder:
    """The ``map_batches`` class an expert writes (Ray Data actor; picklable)."""

    def __init__(self, size: tuple[int, int]):
        self.size = size

    def __call__(self, batch: Batch) -> Batch:
        return {"id": batch["id"], "label": batch["label"],
                "image": decode_batch(batch["path"], self.size)}


def decode(batch: Batch, size: tuple[int, int]) -> Batch:
    """The ``map_batches`` function a first Ray Data script writes (Ray Data task)."""
    return Decoder(size)(batch)


@contextmanager
def ray_data_tuned(work: Workload) -> Iterator[Epochs]:
    import ray.data

    blocks = math.ceil(work.samples / work.rows_per_block)
    ds = ray.data.from_items(work.rows(), override_num_blocks=blocks)
    ds = ds.map_batches(Decoder, fn_constructor_kwargs={"size": work.image_size},
                        batch_size=work.batch_size, batch_format="numpy", num_cpus=1,
                        compute=ray.data.ActorPoolStrategy(size=work.workers))

    def epoch(_index: int) -> Iterator[Batch]:
        # Ray's iterators take no timeout; a hang here is Ray's and shows as a stuck benchmark.
        yield from ds.iter_torch_batches(batch_size=work.batch_size, device="cpu",
                                         prefetch_batches=work.prefetch)

    yield epoch


@contextmanager
def ray_data_defaults(work: Workload) -> Iterator[Epochs]:
    import ray.data

    ds = ray.data.from_items(work.rows())
    ds = ds.map_batches(decode, fn_kwargs={"size": work.image_size})

    def epoch(_index: int) -> Iterator[Batch]:
        yield from ds.iter_torch_batches(batch_size=work.batch_size, device="cpu")

    yield epoch
