"""Building the Ray Data datasets that feed Ray Train: source plan → split → read/decode actors.

::

    driver:  source plan (manifest, classes) ── split by id ──► train / val manifests
    Ray Data:  from_blocks(manifest blocks) ─► map_batches(decode, tasks: ≤ concurrency's max)
    Ray Train: streaming_split(num_workers, equal=True) per dataset

The manifest is shuffled once with ``data.seed`` because folder listings are sorted by class,
and a class-sorted stream makes single-class batches; every later execution of the training set
(a streamed epoch) reads it in a fresh order (:class:`~pipeline.data.udf.reader.EpochManifest`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pyarrow as pa

from pipeline.config import ConfigError
from pipeline.config.callables import load_callable
from pipeline.data.config import (
    DataConfig,
    DigitsSource,
    ImageFolderSource,
    ParquetSource,
    RaySource,
)
from pipeline.data.sources.base import SourcePlan
from pipeline.data.sources.digits import plan_digits
from pipeline.data.sources.image_folder import plan_image_folder
from pipeline.data.sources.parquet import plan_parquet
from pipeline.data.split import validation_mask
from pipeline.data.udf.local import RankSlices
from pipeline.data.udf.reader import EpochManifest, ReaderSpec, decode

# One preprocessing batch per block. Every streamed epoch's first batch waits for the pipeline
# to fill: Ray Data's equal streaming_split holds about two blocks per trainer before handing
# any out, so start-up grows with the block. Measured (examples/quickstart.yaml with a 10 ms per
# sample transform, one decode actor, 2 trainers): first batch 12.5-14 s with 4-batch blocks,
# 4.0-6.6 s with 1-batch blocks; 2,048 JPEGs 256² → 128², one actor: 6.3 → 4.4 s (epoch 1),
# 3.2 → 1.9 s (epoch 2), with the same pass time (per-task overhead is a few ms per block).
BATCHES_PER_BLOCK = 1


@dataclass(frozen=True)
class DataPlan:
    """What the trainer needs to know about the data, plus the datasets themselves."""

    train: Any  # ray.data.Dataset
    val: Any  # ray.data.Dataset | None
    classes: tuple[str, ...]
    field: str  # "image" or "features"
    sample_shape: tuple[int, ...]
    num_train: int
    num_val: int
    origin: str
    train_ids: Any = None  # np.ndarray of the training split's ids, when known on the driver
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason) of files the source did not read
    row_bytes: int = 0  # bytes of one row as the trainers receive it; 0: from sample_shape
    keep_order: bool = False  # ids are positions: every execution must keep block order
    val_slices: RankSlices | None = None  # validation read in the ranks (instead of ``val``)

    @property
    def has_val(self) -> bool:
        """Whether there is a validation set, as a dataset or as slices the ranks read."""
        return self.val is not None or self.val_slices is not None


def plan_source(config: DataConfig) -> tuple[SourcePlan, ReaderSpec] | None:
    """Plan the configured source on the driver (lists files / reads parquet metadata).

    Raises :class:`~pipeline.config.ConfigError` naming the field, the value and the remedy for
    a source that cannot train (missing, empty, one class, a bad parquet file): call it before
    starting Ray and hand the result to :func:`build_datasets`. A ``ray`` source is planned
    once Ray runs (its function builds Ray Datasets): here its function is only imported."""
    source = config.source
    if isinstance(source, RaySource):
        if source.function:
            try:
                load_callable(source.function, "data.source.function")
            except ValueError as exc:
                raise ConfigError([str(exc)]) from exc
        return None
    limits = dict(max_bad_fraction=config.max_bad_fraction,
                  max_consecutive_bad=config.max_consecutive_bad,
                  sample_timeout_s=config.sample_timeout_s)
    mean, std = config.channel_stats()
    common = dict(image_size=config.image_size, channels=config.channels, mean=mean, std=std,
                  transform=config.transform, max_image_pixels=config.max_image_pixels, **limits)
    if isinstance(source, ParquetSource):
        plan, features = plan_parquet(source)
        return plan, ReaderSpec(kind="table", origin=plan.origin, features=features,
                                label_column=source.label_column, id_column=source.id_column,
                                num_classes=len(plan.classes), transform=config.transform,
                                **limits)
    if isinstance(source, DigitsSource):
        plan = plan_digits(source.cache_dir)
    elif isinstance(source, ImageFolderSource):
        plan = plan_image_folder(source.path)
    else:  # pragma: no cover - the loader only builds the kinds above
        raise AssertionError(f"unhandled source {source!r}")
    return plan, ReaderSpec(kind="image", origin=plan.origin, **common)


def _blocks(table: pa.Table, rows_per_block: int) -> list[pa.Table]:
    return [table.slice(i, rows_per_block) for i in range(0, table.num_rows, rows_per_block)]


def _read(manifest: pa.Table, spec: ReaderSpec, config: DataConfig, quarantine: Any,
          rows_per_block: int, pulse: Any = None, reshuffle: int | None = None):
    """The decoding dataset of ``manifest``. With ``reshuffle`` (a seed) its blocks hold
    positions that each execution maps through a permutation of its own (:class:`EpochManifest`):
    every streamed epoch a fresh order across the ranks. Without, the manifest's rows in order.

    Decoding runs in tasks, at most ``data.concurrency``'s max at once (within the pool
    controller's CPU limit, :mod:`pipeline.pool.live_limits`), not in an actor pool: Ray Data
    starts an execution's actors afresh, so every streamed epoch (``data.cache: off``) waited
    for new processes to start and import; tasks run in the worker processes Ray keeps, and each
    keeps its reader (:func:`~pipeline.data.udf.reader.decode`). Measured on
    ``examples/quickstart.yaml``, ``data.cache=off``, 3 epochs (medians of epochs 2-3, two
    runs): the first batch 2.9 s → 0.44 s, an epoch 6.1 s → 1.9 s
    (``benchmarks/results/streamed-epochs-2026-12-07.md``)."""
    import ray
    import ray.data

    rows = None
    if reshuffle is not None:  # the manifest travels once, through the object store
        rows = EpochManifest(ray.put(manifest), reshuffle)
        manifest = pa.table({"pos": np.arange(manifest.num_rows, dtype=np.int64)})
    # from_blocks, not from_arrow: the blocks' metadata is computed here, where the tables are;
    # from_arrow sends a task per block for it, which starts workers that import Ray Data
    # (~1 s of a job's start-up on 2 cores, competing with Ray Train's own start).
    ds = ray.data.from_blocks(_blocks(manifest, rows_per_block))
    ds.context.enable_progress_bars = False  # the driver shows Feedline's own progress
    return ds.map_batches(
        decode,
        fn_kwargs={"dataset": uuid.uuid4().hex, "spec": spec, "quarantine": quarantine,
                   "pulse": pulse, "rows": rows},
        batch_size=config.decode_batch_size,
        compute=ray.data.TaskPoolStrategy(size=config.concurrency[1]),
        num_cpus=config.cpus_per_actor,
        batch_format="numpy",
        **config.placement.ray_options(),
    )


def build_datasets(config: DataConfig, *, ship_uint8: bool = False, quarantine: Any = None,
                   source: tuple[SourcePlan, ReaderSpec] | None = None,
                   datasets: Any = None, pulse: Any = None, reshuffle: bool = True,
                   val_in_rank: bool = False) -> DataPlan:
    """Build the train (and validation) datasets from ``source`` (:func:`plan_source`'s result),
    planning it here when not given; a ``ray`` source takes ``datasets`` (given to
    ``pipeline.run``) or calls its function. The training set's decoding processes send their
    busy time to ``pulse`` (``data.autoscale``), and each streamed epoch of it reads the samples
    in a fresh order unless ``reshuffle`` is false (``train.deterministic``). With ``val_in_rank`` a
    file source's validation set is not a dataset but ``val_slices``, read by the ranks
    themselves (:mod:`pipeline.data.udf.local`). Runs on the driver."""
    if isinstance(config.source, RaySource):
        from pipeline.data.sources.ray_dataset import plan_ray

        return DataPlan(**plan_ray(config, datasets))
    plan, spec = source or plan_source(config)
    spec = replace(spec, ship_uint8=ship_uint8)
    manifest = plan.manifest
    order = np.random.default_rng(config.seed).permutation(manifest.num_rows)
    manifest = manifest.take(pa.array(order))
    seed = config.seed if reshuffle else None

    if plan.kind == "table":
        counts = manifest.column("rows").to_numpy()
        rows_per_block = max(1, BATCHES_PER_BLOCK * config.decode_batch_size
                             // max(1, int(counts.mean())))
        train_spec = replace(spec, keep_ids=(config.val_fraction, config.seed, False))
        val_spec = replace(spec, keep_ids=(config.val_fraction, config.seed, True))
        total = int(counts.sum())
        train_ids = None
        if spec.id_column:  # the split depends on ids we only see in the workers: estimate
            num_val = int(round(total * config.val_fraction))
        else:
            ids = np.concatenate([np.arange(s, s + n) for s, n in
                                  zip(manifest.column("id").to_numpy(), counts, strict=True)])
            is_val = validation_mask(ids, config.val_fraction, config.seed)
            num_val, train_ids = int(is_val.sum()), ids[~is_val]
        train = _read(manifest, train_spec, config, quarantine, rows_per_block, pulse, seed)
        val_manifest = manifest if config.val_fraction > 0 else None
        shape, field, num_train = (len(spec.features),), "features", total - num_val
    else:
        rows_per_block = BATCHES_PER_BLOCK * config.decode_batch_size
        is_val = validation_mask(manifest.column("id").to_numpy(), config.val_fraction,
                                 config.seed)
        train_manifest = manifest.filter(pa.array(~is_val))
        val_manifest = manifest.filter(pa.array(is_val))
        train = _read(train_manifest, spec, config, quarantine, rows_per_block, pulse, seed)
        height, width = config.image_size
        shape, field = (config.channels, height, width), "image"
        num_train, num_val = train_manifest.num_rows, val_manifest.num_rows
        train_ids = train_manifest.column("id").to_numpy()
        val_spec, val_manifest = spec, val_manifest if num_val else None
    val = val_slices = None
    if val_manifest is not None and val_in_rank:
        val_slices = RankSlices(val_manifest, val_spec, config.decode_batch_size)
    elif val_manifest is not None:
        val = _read(val_manifest, val_spec, config, quarantine, rows_per_block)
    if num_train == 0:
        raise ValueError(f"data.val_fraction ({config.val_fraction}) leaves no training samples "
                         f"from {plan.origin}; lower it")
    return DataPlan(train=train, val=val, classes=plan.classes, field=field,
                    sample_shape=shape, num_train=num_train, num_val=num_val, origin=plan.origin,
                    train_ids=train_ids, skipped=plan.skipped, val_slices=val_slices)


