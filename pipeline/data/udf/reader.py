"""Turning manifest rows into training rows, inside Ray Data's decode tasks.

:class:`SampleReader` runs in Ray Data tasks, one per decoding process kept across the tasks
and epochs that process runs (:func:`decode`; it must be picklable): it reads each sample
(an image file, or a parquet row group), decodes and normalises it, applies the user's
transform, and emits ``{"id", "label", "image" | "features"}``. A sample that cannot be read or
decoded is dropped from the batch, counted, and sent to the run's quarantine with its reason;
its good neighbours are still delivered. A failing user transform is a bug, not a bad sample,
and fails the run with the transform's own error.

Image files are read on a helper thread with a deadline (:mod:`pipeline.data.udf.read_images`),
parquet row groups by :mod:`pipeline.data.udf.read_tables`; the bad-sample errors and thresholds are
in :mod:`pipeline.data.udf.bad_samples` (their names are importable from here too).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.config.callables import load_callable
from pipeline.data.udf.bad_samples import (
    MIN_SAMPLES_FOR_FRACTION,
    BadSample,
    Z,
    bad_fraction_message,
    clearly_above,
    first_sources,
)
from pipeline.data.udf.read_images import SPECIAL_FILES, ImageReading, ReadThread, to_eight_bit
from pipeline.data.udf.read_tables import TableReading
from pipeline.errors import BadSampleThresholdError
from pipeline.messages import DecodeBusy, send

__all__ = ["MIN_SAMPLES_FOR_FRACTION", "SPECIAL_FILES", "Z", "BadSample",
           "BadSampleThresholdError", "Batch", "EpochManifest", "ReadThread", "ReaderSpec",
           "SampleReader", "bad_fraction_message", "clearly_above", "decode", "first_sources",
           "to_eight_bit"]

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]

PULSE_S = 1.0  # a reader sends its decode time at most this often (pipeline.pool.controller)
READERS_KEPT = 4  # readers a decoding process keeps (one per dataset; a shared cluster runs many)


@dataclass(frozen=True)
class ReaderSpec:
    """Everything a reader needs; plain values so it pickles to every node."""

    kind: str  # "image" or "table"
    origin: str
    image_size: tuple[int, int] = (32, 32)
    channels: int = 1
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    ship_uint8: bool = False
    transform: str = ""
    features: tuple[str, ...] = ()
    label_column: str = "label"
    id_column: str = ""
    keep_ids: Any = None  # for tables: a (val_fraction, seed, want_val) split applied per row
    max_bad_fraction: float = 1.0
    max_consecutive_bad: int = 1 << 30
    sample_timeout_s: float = float("inf")
    max_image_pixels: int = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS
    num_classes: int = 0  # labels must lie in [0, num_classes); 0 checks only for negatives


class EpochManifest:
    """Positions in, manifest rows out, in an order drawn afresh for every execution of the
    dataset (Ray Data actor side; picklable).

    The training set's blocks hold positions, not manifest rows, so which samples a block (and
    so a rank of ``streaming_split``) gets is decided here, when the block is decoded: Ray Data
    runs the dataset once per epoch and counts its executions, and execution *e* reads the
    manifest through a permutation drawn from (``seed``, *e*). The first execution keeps the
    manifest's own order (it was shuffled once with ``data.seed``). A streamed epoch is so a
    fresh permutation of every sample across the ranks, as ``DistributedSampler(shuffle=True)``
    gives, at no cost beyond an index lookup: no all-to-all shuffle, no extra tasks.
    ``seed`` None keeps the manifest's order every execution (``train.deterministic``: a
    restarted worker group starts counting executions again).
    """

    def __init__(self, manifest: Any, seed: int | None):
        self._manifest = manifest  # a pyarrow Table, or an ObjectRef to one (resolved once)
        self.seed = seed
        self._execution: int | None = None
        self._order: np.ndarray | None = None

    def __call__(self, positions: np.ndarray) -> Batch:
        table = self._table()
        execution = _execution_index() if self.seed is not None else 0
        if execution != self._execution:
            self._execution = execution
            self._order = (None if execution == 0 else np.random.default_rng(
                [self.seed, execution]).permutation(table.num_rows))
        rows = positions if self._order is None else self._order[positions]
        taken = table.take(rows)
        return {name: taken.column(name).to_numpy(zero_copy_only=False)
                for name in taken.column_names}

    def _table(self) -> Any:
        if not hasattr(self._manifest, "take"):
            import ray

            self._manifest = ray.get(self._manifest)
        return self._manifest


def _execution_index() -> int:
    """How many executions of this dataset ended before the one running now (Ray Data counts
    them on the dataset's context, which every task and actor call receives)."""
    from ray.data import DataContext, RandomSeedConfig

    seeds = RandomSeedConfig(seed=0, reseed_after_execution=True)
    return int(seeds.get_seed_tuple(data_context=DataContext.get_current()).execution_idx)


class SampleReader(ImageReading, TableReading):
    """Manifest batch (or positions, with ``rows``) in, decoded rows out; picklable. Ray Data
    tasks call it through :func:`decode`; a rank reading its validation slice, directly."""

    def __init__(self, spec: ReaderSpec, quarantine: Any = None, pulse: Any = None,
                 rows: EpochManifest | None = None):
        self.spec = spec
        self.rows = rows  # positions → this execution's manifest rows
        self.quarantine = quarantine
        # decode time for the elastic controller (pipeline.pool.controller): a RunInbox, or None
        self.pulse, self._busy, self._cpu, self._pushed = pulse, 0.0, 0.0, time.monotonic()
        self._decoded = 0  # rows decoded since the last pulse
        self._name = uuid.uuid4().hex[:8]
        self.seen = self.bad = self.consecutive_bad = self.longest_bad_run = 0
        self.first_bad: list[dict[str, Any]] = []
        self.abandoned = 0  # read threads left stuck in a read
        self._thread: ReadThread | None = None  # made on first use, inside the actor
        self.transform = load_callable(spec.transform, "data.transform") if spec.transform else None
        channels = spec.channels  # a single mean/std applies to every channel
        self._mean = np.asarray(spec.mean * (channels // len(spec.mean)), np.float32)[:, None, None]
        self._std = np.asarray(spec.std * (channels // len(spec.std)), np.float32)[:, None, None]

    # -- common ---------------------------------------------------------------------------

    def _record(self, sample_id: int, source: str, stage: str, exc: BaseException) -> dict:
        self.consecutive_bad += 1
        self.longest_bad_run = max(self.longest_bad_run, self.consecutive_bad)
        return {"id": sample_id, "source": source, "stage": stage,
                "error_type": getattr(exc, "error_type", type(exc).__name__),
                "message": str(exc)[:500] or repr(exc)}

    def _check_thresholds(self, good: int, bad: list[dict[str, Any]]) -> None:
        """Count this batch; raise when the bad samples say the data itself is broken."""
        spec = self.spec
        self.seen += good + len(bad)
        self.bad += len(bad)
        self.first_bad.extend(bad[: max(0, 3 - len(self.first_bad))])
        message = ""
        if self.longest_bad_run > spec.max_consecutive_bad:
            message = (f"data.max_consecutive_bad ({spec.max_consecutive_bad}) exceeded: "
                       f"{self.longest_bad_run} bad samples in a row from {spec.origin}; "
                       f"first: {first_sources(self.first_bad)}")
        elif clearly_above(self.bad, self.seen, spec.max_bad_fraction):
            message = bad_fraction_message(spec.max_bad_fraction, self.bad, self.seen,
                                           spec.origin, self.first_bad)
        if message:
            if self.quarantine is not None:
                self.quarantine.fail.remote(message)
            raise BadSampleThresholdError(message)

    def __call__(self, batch: Batch) -> Batch:
        if self.pulse is None:
            return self._convert(batch)
        start, cpu = time.monotonic(), time.process_time()
        out = None
        try:
            out = self._convert(batch)
            return out
        finally:
            now = time.monotonic()
            self._busy += now - start
            self._cpu += time.process_time() - cpu  # this process's threads (the read thread)
            self._decoded += 0 if out is None else len(out["id"])
            if now - self._pushed >= PULSE_S:
                send(self.pulse, DecodeBusy(actor=self._name, busy_s=self._busy, t=time.time(),
                                            cpu_s=self._cpu, rows=self._decoded))
                self._busy, self._cpu, self._decoded, self._pushed = 0.0, 0.0, 0, now

    def close(self) -> None:
        """Let the read thread go (it exits within a second)."""
        if self._thread is not None:
            self._thread.abandon()

    def _convert(self, batch: Batch) -> Batch:
        if self.rows is not None:
            batch = self.rows(batch["pos"])
        out, bad = self._images(batch) if self.spec.kind == "image" else self._tables(batch)
        if bad:
            logger.warning("quarantined %d bad sample(s), first: %s", len(bad), bad[0])
            if self.quarantine is not None:
                self.quarantine.add.remote(bad)
        self._check_thresholds(len(out["id"]), bad)
        if self.transform is not None and len(out["id"]):
            out = self.transform(out)
            if not isinstance(out, dict) or "id" not in out:
                raise TypeError(f"data.transform ({self.spec.transform!r}) must return the batch "
                                f"dict it was given (with 'id' and 'label'), got {type(out)}")
        return out


_readers: OrderedDict[str, SampleReader] = OrderedDict()  # a task process runs one at a time


def decode(batch: Batch, *, dataset: str, spec: ReaderSpec, quarantine: Any = None,
           pulse: Any = None, rows: EpochManifest | None = None) -> Batch:
    """Ray Data task UDF: ``batch`` decoded by this process's reader of ``dataset`` (a key the
    driver drew for the dataset), made on the process's first task of it and kept for every
    later one: Ray reuses its worker processes for tasks, so a streamed epoch runs in the
    processes the last one warmed, with the same reader (its bad-sample counts, its pulse)."""
    reader = _readers.get(dataset)
    if reader is None:
        reader = _readers[dataset] = SampleReader(spec, quarantine, pulse, rows)
        while len(_readers) > READERS_KEPT:
            _readers.popitem(last=False)[1].close()
    _readers.move_to_end(dataset)
    return reader(batch)
