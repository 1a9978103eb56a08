"""Feedline's data in your own Ray Train loop: :func:`prepare` on the driver, :func:`batches` in
each Train worker, the drop-in replacement for ``get_dataset_shard(...).iter_torch_batches()``.

    import pipeline
    from ray.train import ScalingConfig
    from ray.train.torch import TorchTrainer

    feed = pipeline.prepare("examples/quickstart.yaml")      # driver: decoding datasets, checked

    def loop(config):                                        # your train_loop_per_worker
        for epoch in range(3):
            with pipeline.batches(config["feed"], "train", epoch=epoch) as batches:
                for batch in batches:                        # device tensors
                    x, y, ids = batch["image"], batch["label"], batch["id"]
                    ...
            # batches.stats: how long the loop waited for data, what the copies cost

    TorchTrainer(loop, train_loop_config={"feed": feed.spec}, datasets=feed.datasets,
                 dataset_config=feed.dataset_config,
                 scaling_config=ScalingConfig(num_workers=2)).fit()

What the batches are: the config's ``data`` section decoded by Feedline's readers on Ray Data
actors (bad samples quarantined, never silently dropped: :meth:`Feed.quarantined`), a fresh
permutation across the ranks every epoch (Ray Data reads the samples in a new order each
execution), grouped in
``train.batch_size`` rows, shipped as uint8 when ``transfer.ship_uint8`` and normalised on the
device, prefetched ``transfer.gpu_prefetch`` deep into pinned memory. Every batch carries the
samples' stable ``id``: send each rank's ids of an epoch to the driver (e.g. with
``ray.train.report``) and :meth:`Feed.account` says whether the epoch saw every sample exactly
once. What ``pipeline run`` adds on top (the task, DDP, spans and diagnosis, checkpoints,
caching) stays yours to choose in your loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from pipeline.config import Config, load_config
from pipeline.train.chain import FeedSpec


@dataclass
class Feed:
    """The driver's side: the datasets to hand to ``TorchTrainer`` and what to check after."""

    datasets: dict[str, Any]  # "train" (and "val"): ray.data.Dataset
    spec: FeedSpec
    classes: tuple[str, ...]
    sample_shape: tuple[int, ...]
    num_train: int
    num_val: int
    train_ids: np.ndarray | None
    quarantine: Any = field(repr=False, default=None)  # QuarantineLog actor
    deterministic: bool = False

    @property
    def dataset_config(self) -> Any:
        """``ray.train.DataConfig`` for the trainer: block order kept when
        ``train.deterministic`` (the same rows reach the same rank in every run) or when the ids
        are row positions (a ``ray`` source without an ``id`` column)."""
        import ray.train
        from ray.data import ExecutionOptions

        return ray.train.DataConfig(execution_options=ExecutionOptions(
            preserve_order=self.deterministic))

    def quarantined(self) -> list[dict[str, Any]]:
        """The samples the readers refused so far: ``{id, source, stage, error_type, message}``."""
        import ray

        return ray.get(self.quarantine.records.remote(), timeout=60)

    def account(self, delivered: list[np.ndarray]) -> dict[str, Any]:
        """One epoch's accounting from each rank's ids (the ``id`` column of every batch it
        trained): ``lost`` and ``duplicated`` must be 0; ``split_remainder`` are the up to
        world-size − 1 samples Ray's equal split leaves out. None of it when the ids are not
        known on the driver (parquet with an ``id_column``)."""
        from pipeline.data.accounting import account_epoch

        if self.train_ids is None:
            raise ValueError("the training split's ids are not known on the driver (a parquet "
                             "source with data.source.id_column): compare ids in your loop")
        return account_epoch(self.train_ids, delivered,
                             quarantined=[r["id"] for r in self.quarantined()],
                             world_size=len(delivered))


def prepare(config: str | Path | dict | Config, *, sets: list[str] | tuple[str, ...] = (),
            datasets: Any = None) -> Feed:
    """The datasets of ``config``'s ``data`` section (checked first: a bad source fails here
    with the field and the remedy), for your own ``TorchTrainer``; ``datasets`` (your own Ray
    Datasets, as for ``pipeline.run``) replace its source. Uses the connected Ray, or starts a
    local one as Ray Data does."""
    import ray

    from pipeline.api import check_source, with_datasets
    from pipeline.data import build_datasets
    from pipeline.data.quarantine import QuarantineLog

    cfg = load_config(config, list(sets))
    if datasets is not None:
        cfg = with_datasets(cfg)
    source = check_source(cfg, Console(stderr=True, soft_wrap=True))
    if not ray.is_initialized():
        ray.init()
    quarantine = QuarantineLog.remote(cfg.run.name)
    data = build_datasets(cfg.data, ship_uint8=cfg.transfer.ship_uint8, quarantine=quarantine,
                          reshuffle=not cfg.train.deterministic,
                          source=source, datasets=datasets)
    spec = FeedSpec.from_config(cfg, data.field)
    datasets = {"train": data.train} | ({"val": data.val} if data.val is not None else {})
    return Feed(datasets=datasets, spec=spec, classes=data.classes,
                sample_shape=data.sample_shape, num_train=data.num_train, num_val=data.num_val,
                train_ids=data.train_ids, quarantine=quarantine,
                deterministic=cfg.train.deterministic or data.keep_order)


def batches(spec: FeedSpec, split: str = "train", *, epoch: int = 0, device: Any = None) -> Any:
    """One epoch of this worker's shard of ``split`` as device batches (inside a Ray Train
    worker): a :class:`~pipeline.transfer.DeviceFeeder`, to use in a ``with`` block (its copy
    thread stops on the way out) and iterate; ``.stats`` says what the copies cost and how long
    the loop waited. ``device``: Ray Train's device for this worker by default. Every epoch of
    the training split is a fresh permutation across the ranks (``data.shuffle_buffer`` adds a
    window shuffle seeded by (``data.seed``, ``epoch``, rank)); :mod:`pipeline.train.chain`
    composes the same chain ``pipeline run`` uses, without its cache."""
    import ray.train
    import ray.train.torch

    from pipeline.train.chain import FeedChain

    shard = ray.train.get_dataset_shard(split)
    if shard is None:
        raise ValueError(f"split ({split!r}): this trainer has no such dataset; pass "
                         f"datasets=feed.datasets to TorchTrainer")
    chain = FeedChain(spec, shard, device=device or ray.train.torch.get_device(),
                      rank=ray.train.get_context().get_world_rank(), train=split == "train")
    return chain.epoch(epoch)
