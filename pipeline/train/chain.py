"""The feed chain: one dataset's batches on one rank, an epoch at a time (Train worker).

Composed here once, used by ``pipeline run``'s loop, by :func:`pipeline.batches` in your own
loop and by the ingest benchmark::

    Ray shard ──► cache ──────────────► skip ──► DeviceFeeder ──► device batches
    (streaming_   epoch 1: record         (ids a   (pinned staging, copy stream,
     split)       later: the group's       resumed  transfer.gpu_prefetch deep)
                  rows, dealt anew         epoch
                  (pipeline.train.reshuffle) trained)

A streamed epoch is already a fresh permutation across the ranks (Ray Data's execution reads
the manifest in a new order, :class:`pipeline.data.udf.reader.EpochManifest`), optionally mixed
further in a window of ``data.shuffle_buffer`` rows; a replayed one is a permutation of every
row the group cached. A streamed epoch that skips ids (a resumed one) does not record: its
cache would lack rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from pipeline.config import Config
from pipeline.data.config import RaySource
from pipeline.train.cache import SampleCache
from pipeline.train.reshuffle import Group, Shard, epoch_order, open_shard, replay
from pipeline.transfer import DeviceFeeder
from pipeline.transfer.config import TransferConfig

Batch = dict[str, np.ndarray]


@dataclass(frozen=True)
class FeedSpec:
    """How a worker batches its shard, decided on the driver (plain values; pickles)."""

    field: str  # the model's input column: "image", "features", or a ray source's
    batch_size: int
    seed: int
    transfer: TransferConfig
    normalize: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] | None  # uint8 fields
    shuffle_buffer: int = 0
    reshuffle: str = "global"

    @classmethod
    def from_config(cls, cfg: Config, field: str) -> FeedSpec:
        """The spec of ``cfg`` for batches whose input is ``field``. Only the images Feedline
        decodes ship as uint8 (normalised on the device); other columns are the user's."""
        ours = field == "image" and not isinstance(cfg.data.source, RaySource)
        transfer = cfg.transfer if ours else replace(cfg.transfer, ship_uint8=False)
        return cls(field=field, batch_size=cfg.train.batch_size, seed=cfg.data.seed,
                   transfer=transfer,
                   normalize={"image": cfg.data.channel_stats()} if transfer.ship_uint8 else None,
                   shuffle_buffer=cfg.data.shuffle_buffer, reshuffle=cfg.data.reshuffle)


class FeedChain:
    """The chain of one dataset on one rank (not picklable; one per dataset per worker).

    ``cache`` None streams every epoch. ``train`` False (validation) keeps the recorded order
    and no window shuffle. ``device`` is the runtime's decision (Ray Train's device).
    """

    def __init__(self, spec: FeedSpec, shard: Any, *, device: Any, cache: SampleCache | None = None,
                 rank: int = 0, train: bool = True) -> None:
        self.spec = spec
        self.shard = shard
        self.device = device
        self.cache = cache
        self.rank = rank
        self.train = train
        self.group: Group | None = None  # set by share() once every rank's cache is complete
        self._peers: list[Batch] = []

    @property
    def replays(self) -> bool:
        """Whether the next epoch replays the cache instead of streaming."""
        return self.cache is not None and self.cache.complete

    def shard_info(self, host: str) -> Shard:
        """What this rank tells its peers of its cache (after a complete pass)."""
        cache = self.cache
        return Shard(rank=self.rank, host=host, rows=cache.rows if cache else 0,
                     files=cache.files() if cache else {})

    def status(self) -> dict[str, Any]:
        """The cache's status, and across which ranks replayed epochs are dealt (and why)."""
        status = self.cache.status() if self.cache is not None else {"mode": "off"}
        return status | ({"reshuffle": self.group.reason} if self.group is not None else {})

    def share(self, group: Group, shards: list[Shard]) -> None:
        """Deal replayed epochs over ``group``'s cached rows (``shards``: every rank's)."""
        self.group = group
        self._peers = [self.cache.columns if r == self.rank else open_shard(shards[r])
                       for r in group.ranks]

    def epoch(self, epoch: int, *, skip: np.ndarray | None = None) -> DeviceFeeder:
        """This rank's device batches of ``epoch`` (use in a ``with`` block), without the ids in
        ``skip`` (those a resumed epoch already trained)."""
        batches = self._host(epoch, record=skip is None)
        if skip is not None and len(skip):
            batches = _without(batches, skip)
        return DeviceFeeder.from_config(batches, self.spec.transfer, device=self.device,
                                        uint8_normalize=self.spec.normalize)

    def _host(self, epoch: int, *, record: bool) -> Iterable[Batch]:
        spec, cache = self.spec, self.cache
        if cache is not None and cache.complete:
            if not self.train:
                return cache.replay(batch_size=spec.batch_size)
            cache.replays += 1
            group = self.group or Group((self.rank,), "not shared")
            peers = self._peers or [cache.columns]
            order = epoch_order([len(next(iter(p.values()))) for p in peers],
                                group.position(self.rank), spec.seed, epoch)
            return replay(peers, order, batch_size=spec.batch_size)
        window = spec.shuffle_buffer if self.train else 0
        seed = int(np.random.SeedSequence([spec.seed, epoch, self.rank]).generate_state(1)[0])
        batches = self.shard.iter_batches(batch_size=spec.batch_size, batch_format="numpy",
                                          prefetch_batches=spec.transfer.host_prefetch,
                                          local_shuffle_buffer_size=window or None,
                                          local_shuffle_seed=seed if window else None)
        if cache is None or not cache.enabled:
            return batches
        if not record:
            cache.discard()
            return batches
        return cache.record(batches)


def _without(batches: Iterable[Batch], skip: np.ndarray) -> Iterator[Batch]:
    """``batches`` less the rows whose id is in ``skip``; a batch left empty is dropped. A
    replayed batch's rows are gathered here only when some of them go."""
    for batch in batches:
        keep = ~np.isin(batch["id"], skip)
        if keep.all():
            yield batch
        elif keep.any():
            yield {k: np.asarray(v)[keep] for k, v in batch.items()}
