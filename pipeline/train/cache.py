"""Decoded-sample cache: epoch 1 decodes through Ray Data, later epochs replay the samples.

Runs in each Train worker (no Ray import; not picklable once filled). Decoding a JPEG costs
milliseconds of CPU; reading the decoded uint8 sample back costs microseconds. When a rank's
decoded shard fits a budget, the first epoch records every batch it receives and the next
epochs replay them, so no Ray Data execution, actor start-up or first-block wait happens
again::

    epoch 1:  shard.iter_batches ──► record(batches) ──► DeviceFeeder ──► step
                                         │ (one copy into the cache's files)
    epoch 2+:   every rank's cached rows, one permutation ──► DeviceFeeder ──► step
                (pipeline.train.reshuffle: a gather per batch, from this rank's files and
                 its peers' on the same node, mapped without a copy)

The columns live in files: ``memory`` puts them in shared memory (``/dev/shm``, a tmpfs: the
bytes stay in RAM), ``disk`` on local disk. Either way the other ranks of the node map them
read-only, so every epoch can deal all cached rows afresh to all ranks.

What stays true with the cache on:

- exactly once per epoch: the ranks together replay every row they recorded, each once
  (``equal=True`` gave every rank the same count, so every rank gets the same share of the
  deal and DDP steps stay equal);
- bad samples: they were dropped and quarantined by the readers while recording and are never
  replayed;
- augmentation: random flips and crops run on the device after the cache, seeded by
  (seed, epoch, id), so each epoch still differs;
- shuffling: each replayed epoch is a permutation of the rows the ranks cached, seeded by
  (seed, epoch), dealt to the ranks as ``DistributedSampler(shuffle=True)`` deals indices
  (``data.reshuffle`` says across which ranks; :mod:`pipeline.train.reshuffle`).

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
import weakref
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

    ``directory`` holds the columns' ``.npy`` files (shared memory or disk); without one a
    memory cache keeps them in this process, where no peer can read them. The recorded pass's
    wall time is compared with the time to read the cache back when ``auto`` chose disk.
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
        if self._dir is not None:  # a loop that raised never discards: its files go anyway
            weakref.finalize(self, shutil.rmtree, self._dir, ignore_errors=True)

    @property
    def enabled(self) -> bool:
        return self.decision.mode != "off"

    @property
    def rows(self) -> int:
        return self._rows if self.complete else 0

    @property
    def columns(self) -> dict[str, np.ndarray]:
        """The recorded rows by column (empty until a complete pass)."""
        return self._columns if self.complete else {}

    def files(self) -> dict[str, str]:
        """Column → the ``.npy`` file that holds it (a peer maps ``[:rows]`` of it); empty when
        the rows are not in files."""
        return {key: str(column.filename) for key, column in self.columns.items()
                if isinstance(column, np.memmap)}

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

    def replay(self, *, batch_size: int) -> Iterator[Batch]:
        """The recorded rows as batches of ``batch_size`` in recorded order (views, no copy);
        a reshuffled replay is :func:`pipeline.train.reshuffle.replay`'s."""
        if not self.complete:
            raise RuntimeError("SampleCache.replay before a complete recorded pass")
        self.replays += 1
        cols, n = self._columns, self._rows
        for start in range(0, n, batch_size):
            yield {k: v[start:start + batch_size] for k, v in cols.items()}

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
                self._dir.parent.parent.rmdir()  # feedline-cache, once no run has one

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
        if self._dir is not None:
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


SHARED_MEMORY = Path("/dev/shm")


def cache_dir(base: str, run_name: str, dataset: str, rank: int, *,
              memory: bool = False) -> Path | None:
    """Where a rank's cache files live: for ``memory``, shared memory (``/dev/shm``; None where
    the machine has none: the rows then stay in the process, unshared), else ``base`` (default
    the system's temp dir); below it feedline-cache/<run>-<pid>/<dataset>-rank<r>, removed when
    the pass is discarded. Folders a dead process left (a killed worker) are removed first."""
    if memory and not SHARED_MEMORY.is_dir():
        return None
    base_dir = SHARED_MEMORY if memory else Path(base or os.environ.get("TMPDIR", "/tmp"))
    root = base_dir / "feedline-cache"
    _remove_orphans(root)
    return root / f"{run_name}-{os.getpid()}" / f"{dataset}-rank{rank}"


_SWEPT: set[Path] = set()  # roots this process already cleaned


def _remove_orphans(root: Path) -> None:
    """Delete the cache folders of processes that no longer run on this machine: files in
    shared memory outlive a SIGKILLed worker and would hold its RAM until reboot. Once per
    root and process."""
    if root in _SWEPT or not root.is_dir():
        return
    _SWEPT.add(root)
    for folder in root.iterdir():
        pid = folder.name.rpartition("-")[2]
        if pid.isdigit() and not _alive(int(pid)):
            logger.info("cache: removing %s (process %s is gone)", folder, pid)
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def disk_free(directory: Path) -> int:
    """Free bytes on the filesystem that holds (or will hold) ``directory``."""
    for parent in [directory, *directory.parents]:
        if parent.exists():
            return shutil.disk_usage(parent).free
    return 0


def rank_cache(requested: str, *, rows: int, per_sample: int, world: int, budget: float,
               free: int, memory_dir: Path | None, disk_dir: Path,
               deterministic: bool = False) -> SampleCache:
    """The cache of one rank's shard of ``rows`` samples of ``per_sample`` bytes, its files in
    ``memory_dir`` or ``disk_dir`` (:func:`cache_dir`) as the decision says. ``budget`` and
    ``free`` must be the same on every rank (the smallest of any), so all ranks decide alike."""
    auto = requested == "auto"
    if auto and deterministic:  # a restarted epoch streams Ray Data's ordered split
        decision = CacheDecision("off", "auto: off with train.deterministic (a restarted epoch "
                                        "must replay Ray Data's ordered stream)")
    else:
        decision = decide(requested, shard_bytes=-(-rows // world) * per_sample,
                          memory_budget=int(budget), disk_free=int(free))
    directory = memory_dir if decision.mode == "memory" else disk_dir
    return SampleCache(decision, directory=directory, auto=auto)
