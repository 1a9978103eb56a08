"""A rank's share of the validation set, read and decoded in the rank's own process (Train
worker side; no Ray Data).

Validation has no step in lockstep and is a pass over a small set, decoded once per run when
the cache keeps it. Through Ray Data it cost two Ray processes per pass, a split coordinator
and a decode actor, started while the trainers wait at the end of epoch 1 (and every epoch
with ``data.cache: off``). Here each rank reads a contiguous slice of the validation manifest
with the same :class:`~pipeline.data.udf.reader.SampleReader` the decode actors run: the same
decoding, user transform, quarantine and bad-sample thresholds. The rows are in the manifest's
order (shuffled once with ``data.seed``), so the slices are random subsets of the set and
together hold every row once. It decodes on the trainer's node, on the thread that feeds the
trainer (:class:`~pipeline.transfer.DeviceFeeder`), as a ``DataLoader`` over a
``DistributedSampler`` would. A ``ray`` source's validation set stays a Ray Dataset.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.data.udf.reader import Batch, ReaderSpec, SampleReader


@dataclass(frozen=True)
class RankSlices:
    """The validation manifest and how to read it (decided on the driver; pickles)."""

    manifest: Any  # pyarrow.Table: the reader's input rows (files, or parquet row groups)
    spec: ReaderSpec
    decode_batch_size: int

    def shard(self, rank: int, world: int, quarantine: Any = None) -> LocalShard:
        """Rank ``rank`` of ``world``'s contiguous slice (sizes differ by at most one row)."""
        bounds = np.linspace(0, self.manifest.num_rows, world + 1).round().astype(int)
        start, stop = int(bounds[rank]), int(bounds[rank + 1])
        return LocalShard(self.manifest.slice(start, stop - start), self.spec,
                          decode_batch_size=self.decode_batch_size, quarantine=quarantine)


class LocalShard:
    """The part of Ray's ``DataIterator`` that :class:`~pipeline.train.chain.FeedChain` uses,
    over ``manifest`` decoded in this process. One reader serves every pass (each epoch's
    with ``data.cache: off``), so its bad-sample thresholds count them all."""

    def __init__(self, manifest: Any, spec: ReaderSpec, *, decode_batch_size: int,
                 quarantine: Any = None) -> None:
        self.manifest = manifest
        self.rows = manifest.num_rows
        self.decode_batch_size = decode_batch_size
        self._reader = SampleReader(spec, quarantine)

    def iter_batches(self, *, batch_size: int, batch_format: str = "numpy",
                     prefetch_batches: int = 0, local_shuffle_buffer_size: int | None = None,
                     local_shuffle_seed: int | None = None) -> Iterator[Batch]:
        """The decoded rows in manifest order, ``batch_size`` at a time (the last one shorter).
        No prefetch here: the device feeder's thread pulls these batches ahead of the loop."""
        if batch_format != "numpy" or local_shuffle_buffer_size:
            raise ValueError(f"a local shard yields numpy batches in order, not "
                             f"batch_format={batch_format!r}, local_shuffle_buffer_size="
                             f"{local_shuffle_buffer_size!r}")
        return rebatch(self._decoded(), batch_size)

    def _decoded(self) -> Iterator[Batch]:
        for start in range(0, self.rows, self.decode_batch_size):
            chunk = self.manifest.slice(start, self.decode_batch_size)
            yield self._reader({name: chunk.column(name).to_numpy(zero_copy_only=False)
                                for name in chunk.column_names})


def rebatch(batches: Iterable[Batch], size: int) -> Iterator[Batch]:
    """``batches`` (dicts of equal-length columns, any lengths) as batches of ``size`` rows,
    the last one holding what is left."""
    held: list[Batch] = []
    rows = 0
    for batch in batches:
        n = len(next(iter(batch.values()))) if batch else 0
        if not n:
            continue
        held.append(batch)
        rows += n
        while rows >= size:
            joined = _concat(held)
            yield {k: v[:size] for k, v in joined.items()}
            rest = {k: v[size:] for k, v in joined.items()}
            rows -= size
            held = [rest] if rows else []
    if rows:
        yield _concat(held)


def _concat(batches: list[Batch]) -> Batch:
    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
