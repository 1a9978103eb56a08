"""The ingest benchmark's contenders without Ray: torch's DataLoader and the ceiling.

Private to :mod:`pipeline.bench.ingest`; same protocol and same work as
:mod:`pipeline.bench._ingest_contenders` (read that docstring first).

================  ===========================================================================
dataloader_tuned  ``DataLoader(num_workers=workers, persistent_workers=True,
                  prefetch_factor=ceil(prefetch / workers), pin_memory=<CUDA present>)``; each
                  worker decodes a whole batch (a ``BatchSampler`` over a batched dataset, so
                  no per-sample collate): the strongest plain-torch form
ceiling           :func:`decode_batch` alone in a process pool of every core, no framework;
                  only ids (and, when verifying, per-sample CRCs) come back, so nothing that
                  also delivers the pixels can go faster
================  ===========================================================================
"""

from __future__ import annotations

import collections
import itertools
import math
import multiprocessing
import zlib
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from typing import Any

import numpy as np

from pipeline.bench._ingest_contenders import Batch, Epochs, Workload, decode_batch


def crc(images: np.ndarray) -> np.ndarray:
    """Per-sample CRC-32 of ``batch x ...`` uint8 pixels: compares contenders' bytes exactly."""
    return np.asarray([zlib.crc32(np.ascontiguousarray(image).tobytes()) for image in images],
                      dtype=np.int64)


# -- torch DataLoader -----------------------------------------------------------------------------

class _BatchDataset:
    """Map-style dataset indexed by a list of positions (one batch); picklable to workers."""

    def __init__(self, work: Workload):
        self.ids, self.paths, self.labels = work.ids, work.paths, work.labels
        self.size = work.image_size

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, indices: list[int]) -> Batch:
        index = np.asarray(indices)
        return {"id": self.ids[index], "label": self.labels[index],
                "image": decode_batch(self.paths[index], self.size)}


@contextmanager
def dataloader_tuned(work: Workload) -> Iterator[Epochs]:
    import torch
    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    dataset = _BatchDataset(work)
    sampler = BatchSampler(SequentialSampler(range(len(dataset))), work.batch_size, False)
    loader = DataLoader(dataset, sampler=sampler, batch_size=None, num_workers=work.workers,
                        persistent_workers=True, pin_memory=torch.cuda.is_available(),
                        prefetch_factor=max(1, math.ceil(work.prefetch / work.workers)),
                        timeout=work.timeout_s)

    def epoch(_index: int) -> Iterator[Batch]:
        yield from loader  # the workers start on the first epoch and persist

    try:
        yield epoch
    finally:
        # persistent workers outlive a pass by design; stop them before the next contender
        running = getattr(loader, "_iterator", None)
        if running is not None:
            running._shutdown_workers()


# -- the ceiling: the decode alone on every core --------------------------------------------------

_SIZE: tuple[int, int] | None = None


def _init_worker(size: tuple[int, int]) -> None:
    global _SIZE
    _SIZE = size


def _decode_only(ids: np.ndarray, paths: np.ndarray, verify: bool) -> Batch:
    assert _SIZE is not None, "pool initializer did not run"
    images = decode_batch(paths, _SIZE)
    return {"id": ids, "crc": crc(images)} if verify else {"id": ids}


@contextmanager
def ceiling(work: Workload) -> Iterator[Epochs]:
    # An executor, not multiprocessing.Pool: its shutdown lets workers exit on their own,
    # where Pool's __exit__ SIGTERMs them (and Ray's inherited handler logs every one).
    with ProcessPoolExecutor(work.cores, mp_context=multiprocessing.get_context(),
                             initializer=_init_worker, initargs=(work.image_size,)) as pool:

        def epoch(_index: int) -> Iterator[Batch]:
            # every core decoding and one batch queued behind each: none ever waits for work
            return _bounded(pool, work.chunks(), 2 * work.cores, work)

        yield epoch


def _bounded(pool: ProcessPoolExecutor, chunks: list[Any], window: int,
             work: Workload) -> Iterator[Batch]:
    """In order, at most ``window`` batches queued or decoding: memory stays bounded."""
    todo = iter(chunks)
    pending = collections.deque(pool.submit(_decode_only, *chunk, work.verify)
                                for chunk in itertools.islice(todo, window))
    while pending:
        result = pending.popleft().result(timeout=work.timeout_s)
        chunk = next(todo, None)
        if chunk is not None:
            pending.append(pool.submit(_decode_only, *chunk, work.verify))
        yield result
