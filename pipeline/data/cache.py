"""Decoded-sample cache: epoch 1 decodes through Ray Data, later epochs replay the samples.

Runs in each Train worker (no Ray import; not picklable once filled). Decoding a JPEG costs
milliseconds of CPU; reading the decoded uint8 sample back costs microseconds. When a rank's
decoded shard fits a budget, the first epoch records every batch it receives and the next
epochs replay them from this process, so no Ray Data execution, actor start-up or first-block
wait happens again::

    epoch 1:  shard.iter_batches ──► record(batches) ──► DeviceFeeder ──► step
                                         │ (one copy into the cache)
    epoch 2+:                   replay(epoch) ──► DeviceFeeder ──► step
                                 (a view per batch in recorded order, or one gather when
                                  the rows are reshuffled)

What stays true with the cache on:

- exactly once per epoch: a rank replays exactly the rows streaming_split gave it in the
  recorded epoch (``equal=True`` gives every rank the same count, so DDP steps stay equal);
- bad samples: they were dropped and quarantined by the readers while recording and are never
  replayed;
- augmentation: random flips and crops run on the device after the cache, seeded by
  (seed, epoch, id), so each epoch still differs;
- shuffling: with ``data.shuffle_buffer`` > 0 each replay is a full permutation of the rank's
  rows seeded by (seed, epoch, rank). Rows do not move between ranks after the recorded epoch.

A cache is complete only after a whole pass ended normally; a pass that was cut short
(an error, a resumed epoch that skipped ids) leaves it empty and the next epoch streams again.
``auto`` chooses ``memory`` when the rank's shard fits ``data.cache_memory_fraction`` of the
memory available to this rank, else ``disk`` when the cache directory has room, else ``off``;
after the recorded epoch a disk cache is kept only if reading it back is faster than the
decoding it replaces (Cachew's rule: cache when the cache is the faster source).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]
MODES = ("auto", "memory", "disk", "off")


@dataclass(frozen=True)
class CacheDecision:
    """What the cache will do on this rank, and why (shown in the summary)."""

    mode: str  # "memory", "disk" or "off"
    reason: str


def decide(requested: str, *, shard_bytes: int, memory_budget: int,
           disk_free: int) -> CacheDecision:
    """Where a rank's decoded shard of ``shard_bytes`` goes. Pure: numbers in, decision out."""
    if requested not in MODES:
        raise ValueError(f"data.cache ({requested!r}) must be one of {', '.join(MODES)}")
    size = _mib(shard_bytes)
    if requested == "off":
        return CacheDecision("off", "data.cache: off")
    if requested == "memory":
        return CacheDecision("memory", f"data.cache: memory ({size} per rank)")
    if requested == "disk":
        return CacheDecision("disk", f"data.cache: disk ({size} per rank)")
    if shard_bytes <= memory_budget:
        return CacheDecision("memory", f"auto: the rank's decoded shard ({size}) fits the "
                                       f"memory budget ({_mib(memory_budget)})")
    if shard_bytes <= disk_free // 2:
        return CacheDecision("disk", f"auto: the rank's decoded shard ({size}) exceeds the memory "
                                     f"budget ({_mib(memory_budget)}); on local disk "
                                     f"({_mib(disk_free)} free)")
    return CacheDecision("off", f"auto: the rank's decoded shard ({size}) fits neither the "
                                f"memory budget ({_mib(memory_budget)}) nor the disk "
                                f"({_mib(disk_free)} free)")


def _mib(nbytes: float) -> str:
    return f"{nbytes / 2**20:,.0f} MiB"


def available_memory() -> int:
    """Bytes of memory this machine can still give (``MemAvailable``), 0 when unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError as exc:
        logger.info("cache: cannot read /proc/meminfo (%s); memory budget 0", exc)
    return 0


class SampleCache:
    """One rank's cache of one dataset (train or validation); see the module docstring.

    ``directory`` is used by the disk mode only. ``decode_s`` of the recorded pass (its wall
    time) is compared with the time to read the cache back when ``auto`` chose disk.
    """

    def __init__(self, decision: CacheDecision, *, directory: str | Path | None = None,
                 auto: bool = False) -> None:
        self.decision = decision
        self._auto = auto
        self._dir = Path(directory) if directory else None
        self._columns: dict[str, np.ndarray] = {}
        self._rows = 0
        self.complete = False
        self.recorded_s = 0.0
        self.replays = 0

    @property
    def enabled(self) -> bool:
        return self.decision.mode != "off"

    @property
    def rows(self) -> int:
        return self._rows if self.complete else 0

    @property
    def nbytes(self) -> int:
        return sum(a[: self._rows].nbytes for a in self._columns.values())

    def record(self, batches: Iterable[Batch]) -> Iterator[Batch]:
        """Pass ``batches`` through unchanged, keeping a copy of every row; the cache is
        complete when the source is exhausted. Use :meth:`discard` for a pass that skipped
        rows (a resumed epoch)."""
        self._reset()
        started = time.perf_counter()
        for batch in batches:
            self._append(batch)
            yield batch
        self.recorded_s = time.perf_counter() - started
        self._finish()

    def replay(self, *, batch_size: int, shuffle_seed: int | None = None) -> Iterator[Batch]:
        """The recorded rows as batches of ``batch_size``: in recorded order (views, no copy),
        or reshuffled with ``shuffle_seed`` (one gather per batch)."""
        if not self.complete:
            raise RuntimeError("SampleCache.replay before a complete recorded pass")
        self.replays += 1
        cols, n = self._columns, self._rows
        order = (np.random.default_rng(shuffle_seed).permutation(n)
                 if shuffle_seed is not None else None)
        for start in range(0, n, batch_size):
            if order is None:
                yield {k: v[start:start + batch_size] for k, v in cols.items()}
            else:
                idx = np.sort(order[start:start + batch_size])  # sorted: sequential reads
                yield {k: v[idx] for k, v in cols.items()}

    def discard(self) -> None:
        """Forget the recorded rows (and delete a disk cache's files)."""
        self._reset()

    def status(self) -> dict[str, Any]:
        return {"mode": self.decision.mode, "reason": self.decision.reason,
                "rows": self.rows, "bytes": self.nbytes if self.complete else 0,
                "replays": self.replays}

    # -- internals ------------------------------------------------------------------------

    def _reset(self) -> None:
        self._columns, self._rows, self.complete = {}, 0, False
        if self._dir is not None and self._dir.exists():
            shutil.rmtree(self._dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # the run's folder, once its last cache is gone
                self._dir.parent.rmdir()

    def _append(self, batch: Batch) -> None:
        n = len(next(iter(batch.values())))
        need = self._rows + n
        for key, value in batch.items():
            value = np.asarray(value)
            column = self._columns.get(key)
            if column is None or len(column) < need:
                column = self._grow(key, column, value, need)
            column[self._rows:need] = value
        self._rows = need

    def _grow(self, key: str, column: np.ndarray | None, value: np.ndarray,
              need: int) -> np.ndarray:
        capacity = max(need, 2 * (len(column) if column is not None else 0), 1024)
        if self.decision.mode == "disk":
            assert self._dir is not None, "disk cache without a directory"
            self._dir.mkdir(parents=True, exist_ok=True)
            path = self._dir / f"{key}.{capacity}.npy"
            grown = np.lib.format.open_memmap(path, mode="w+", dtype=value.dtype,
                                              shape=(capacity, *value.shape[1:]))
        else:
            grown = np.empty((capacity, *value.shape[1:]), value.dtype)
        if column is not None:
            grown[: self._rows] = column[: self._rows]
            if isinstance(column, np.memmap):
                old = Path(column.filename)
                del column
                old.unlink(missing_ok=True)
        self._columns[key] = grown
        return grown

    def _finish(self) -> None:
        self.complete = True
        self._columns = {k: v[: self._rows] for k, v in self._columns.items()}  # spare capacity off
        for column in self._columns.values():
            if isinstance(column, np.memmap):
                column.flush()
        if self.decision.mode == "disk" and self._auto and self._rows:
            read_s = self._read_back_s()
            if read_s >= self.recorded_s:
                self.decision = CacheDecision("off", f"auto: reading the disk cache back "
                                                     f"({read_s:.2f} s) is not faster than the "
                                                     f"recorded pass ({self.recorded_s:.2f} s)")
                self._reset()
                return
            self.decision = CacheDecision("disk", f"{self.decision.reason}; read back in "
                                                  f"{read_s:.2f} s vs {self.recorded_s:.2f} s "
                                                  f"streamed")
        logger.info("cache %s: %d rows, %s", self.decision.mode, self._rows, _mib(self.nbytes))

    def _read_back_s(self) -> float:
        """Time to read every cached byte once (a cold-ish read: pages may still be cached)."""
        started = time.perf_counter()
        for column in self._columns.values():
            for start in range(0, self._rows, 4096):
                np.asarray(column[start:start + 4096]).sum(dtype=np.int64)
        return time.perf_counter() - started


def cache_dir(base: str, run_name: str, dataset: str, rank: int) -> Path:
    """Where a rank's disk cache lives: ``base`` (default the system's temp dir) /
    feedline-cache/<run>-<pid>/<dataset>-rank<r>; removed when the pass is discarded."""
    root = Path(base or os.environ.get("TMPDIR", "/tmp")) / "feedline-cache"
    return root / f"{run_name}-{os.getpid()}" / f"{dataset}-rank{rank}"


def disk_free(directory: Path) -> int:
    """Free bytes on the filesystem that holds (or will hold) ``directory``."""
    for parent in [directory, *directory.parents]:
        if parent.exists():
            return shutil.disk_usage(parent).free
    return 0


def rank_cache(requested: str, *, rows: int, per_sample: int, world: int, budget: float,
               free: int, directory: Path, deterministic: bool = False) -> SampleCache:
    """The cache of one rank's shard of ``rows`` samples of ``per_sample`` bytes. ``budget`` and
    ``free`` must be the same on every rank (the smallest of any), so all ranks decide alike."""
    auto = requested == "auto"
    if auto and deterministic:  # a restarted epoch streams Ray Data's ordered split
        decision = CacheDecision("off", "auto: off with train.deterministic (a restarted epoch "
                                        "must replay Ray Data's ordered stream)")
    else:
        decision = decide(requested, shard_bytes=-(-rows // world) * per_sample,
                          memory_budget=int(budget), disk_free=int(free))
    return SampleCache(decision, directory=directory, auto=auto)


def epoch_batches(shard: Any, cache: SampleCache | None, *, batch_size: int,
                  prefetch_batches: int, shuffle_buffer: int = 0,
                  shuffle_seed: int | None = None, record: bool = True) -> Iterable[Batch]:
    """One epoch of host batches: a complete ``cache`` replays (no Ray Data execution starts);
    otherwise the Ray Data ``shard`` streams, and a whole pass (``record``) fills the cache. A
    pass that skips rows (a resumed epoch) must not record. With ``shuffle_buffer`` > 0 rows are
    shuffled with ``shuffle_seed``: in a window when streaming, all of them on replay."""
    if cache is not None and cache.complete:
        return cache.replay(batch_size=batch_size,
                            shuffle_seed=shuffle_seed if shuffle_buffer else None)
    batches = shard.iter_batches(batch_size=batch_size, batch_format="numpy",
                                 prefetch_batches=prefetch_batches,
                                 local_shuffle_buffer_size=shuffle_buffer or None,
                                 local_shuffle_seed=shuffle_seed if shuffle_buffer else None)
    if cache is None or not cache.enabled:
        return batches
    if not record:
        cache.discard()
        return batches
    return cache.record(batches)
