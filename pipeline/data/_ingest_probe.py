"""Measuring one ingest pass: batch waits as the consumer sees them, and the memory it cost.

Private to :mod:`pipeline.data.ingest_bench`. Two instruments, both on the driver:

- :func:`time_pass` drives an iterator of batches the way a training step would (optionally
  sleeping like a GPU step after each batch) and times every ``next()``;
- :class:`ResourceProbe` samples, in a thread, the proportional set size (PSS) of this process
  and all its descendants (DataLoader and pool workers; Ray's raylet, its workers and actors
  when this process started Ray) and Ray's object store. PSS, not RSS: forked workers and Ray
  workers mapping the object store share pages, and RSS would count them once per process.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np

from pipeline.profile.object_store import object_store_reader

logger = logging.getLogger(__name__)

MIB = float(1 << 20)


def checksums(batch: dict[str, Any]) -> dict[int, float]:
    """Per-sample float64 sum of the image, keyed by id: compares contenders' outputs."""
    if "checksum" in batch:  # the ceiling reports sums computed next to the decode
        sums = np.asarray(batch["checksum"], dtype=np.float64)
    else:
        image = np.asarray(batch["image"])
        sums = image.reshape(len(image), -1).sum(axis=1, dtype=np.float64)
    return dict(zip(np.asarray(batch["id"]).tolist(), sums.tolist(), strict=True))


def time_pass(batches: Iterator[dict[str, Any]], *, started: float, sleep_s: float,
              verify: bool) -> dict[str, Any]:
    """Consume every batch; returns the pass's timings (seconds) and, if asked, checksums.

    ``started`` is when the contender began building its pipeline, so time to first batch
    includes start-up. Steady figures exclude the first batch: they describe the stream once
    it flows. The final ``next()`` that finds the end counts as a wait (a slow tail is a stall).
    """
    waits: list[float] = []
    first_size = total = 0
    first_at = None
    sums: dict[int, float] = {}
    while True:
        asked = time.perf_counter()
        batch = next(batches, None)
        got = time.perf_counter()
        if batch is None:
            tail = got - asked
            break
        size = len(batch["id"])
        if first_at is None:
            first_at, first_size = got, size
        else:
            waits.append(got - asked)
        total += size
        if verify:
            sums.update(checksums(batch))
        batch = None  # like a training step: do not hold the batch while asking for the next
        if sleep_s:
            time.sleep(sleep_s)
    ended = time.perf_counter()
    if first_at is None:
        raise RuntimeError("the contender delivered no batch at all")
    steady_wall = ended - first_at
    steady_samples = total - first_size
    stalled = sum(waits) + tail
    return {
        "samples": total,
        "batches": len(waits) + 1,
        "ttfb_s": first_at - started,
        "wall_s": ended - started,
        "steady_sps": steady_samples / steady_wall if steady_samples and steady_wall else None,
        "stall_fraction": stalled / steady_wall if steady_wall > 0 else None,
        "wait_p50_ms": float(np.percentile(waits, 50)) * 1e3 if waits else None,
        "wait_p99_ms": float(np.percentile(waits, 99)) * 1e3 if waits else None,
        "checksums": sums if verify else None,
    }


class ResourceProbe:
    """Peak PSS of this process tree and peak object-store use during a ``with`` block.

    Driver only; not picklable. Errors in the sampling thread are re-raised on exit.
    """

    def __init__(self, interval_s: float = 0.2):
        if not interval_s > 0:
            raise ValueError(f"interval_s ({interval_s!r}) must be > 0 seconds")
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._store = object_store_reader()
        self.ray_in_tree = False
        # pid -> (CPU seconds when first seen, when last seen): work done during the pass
        self._cpu: dict[int, tuple[float, float]] = {}
        self.baseline_pss = self.peak_pss = 0
        self.store_peak = self._store_start = self._spilled = 0

    def _pss(self) -> int:
        import psutil  # Ray vendors it and puts it on sys.path when imported

        me = psutil.Process()
        total = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                total += proc.memory_full_info().pss
                times = proc.cpu_times()
                if proc.name() == "raylet":
                    self.ray_in_tree = True
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue  # a worker that exited between the listing and the read
            cpu = times.user + times.system
            first = self._cpu.get(proc.pid, (0.0 if self._thread else cpu, 0.0))[0]
            self._cpu[proc.pid] = (first, cpu)
        return total

    def _sample(self) -> None:
        self.peak_pss = max(self.peak_pss, self._pss())
        if self._store is not None:
            used, spilled = self._store()
            self.store_peak = max(self.store_peak, used)
            self._spilled = spilled

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._sample()
        except BaseException as exc:  # re-raised on the consuming thread in __exit__
            self._error = exc

    def __enter__(self) -> ResourceProbe:
        self.baseline_pss = self.peak_pss = self._pss()
        if self._store is not None:
            self.store_peak, self._store_start = self._store()
            self._spilled = self._store_start
        self._thread = threading.Thread(target=self._run, name="ingest-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            if self._thread.is_alive():
                raise RuntimeError("the ingest resource probe did not stop within 30 s")
        if self._error is not None:
            raise RuntimeError(f"the ingest resource probe failed: {self._error!r}") \
                from self._error
        self._sample()

    def cpu_seconds(self) -> float:
        """CPU time the process tree spent during the block, all processes together.

        A process that started during the block counts from zero; one that exited counts up
        to its last sample (at most ``interval_s`` of its work is missed).
        """
        return sum(last - first for first, last in self._cpu.values())

    def result(self) -> dict[str, Any]:
        """Peaks in MiB; ``peak_extra_mb`` is the peak above the tree's PSS before the pass."""
        store = self._store is not None
        return {
            "cpu_s": self.cpu_seconds(),
            "peak_pss_mb": self.peak_pss / MIB,
            "peak_extra_mb": (self.peak_pss - self.baseline_pss) / MIB,
            "store_peak_mb": self.store_peak / MIB if store else None,
            "spilled_mb": (self._spilled - self._store_start) / MIB if store else None,
        }
