"""What a contender costs the machine: CPU seconds and memory of every process it uses.

Driver only; Linux (reads ``/proc``). A contender is more than the benchmark's process: Ray's
raylet, its workers and actors (when this process started Ray, they are its descendants), and
DataLoader or pool workers. :class:`TreeProbe` samples this process and all its descendants
in a thread:

- CPU: ``utime + stime`` per process. A process seen when the probe starts counts from that
  value, one born later from zero, one that exits up to its last sample (at most one
  ``interval_s`` of its work is missed). :meth:`TreeProbe.cpu_seconds` takes a fresh reading,
  so a pass's CPU is read at the same instants as its clock.
- Memory: the proportional set size (PSS) from ``smaps_rollup``; RSS would count pages shared
  by forked workers, and the object store every Ray worker maps, once per process.

Whether Ray's workers are in the tree is recorded (``ray_in_tree``): when the benchmark joins
a Ray started elsewhere they are not, their CPU is invisible, and the physical check says so.
"""

from __future__ import annotations

import os
import statistics
import threading
import time

from pipeline.procfs import PROC as _PROC
from pipeline.procfs import ProcessTree

MIB = float(1 << 20)


def _pss(pid: int) -> int:
    """Proportional set size of ``pid`` in bytes (0 if it is gone)."""
    try:
        for line in (_PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass  # exited between the listing and the read: it holds no memory any more
    return 0


class TreeProbe:
    """CPU seconds and peak PSS of this process tree during a ``with`` block.

    Driver only; not picklable. An error in the sampling thread is re-raised on exit.
    """

    def __init__(self, interval_s: float = 0.5):
        if not _PROC.joinpath("self", "smaps_rollup").exists():
            raise RuntimeError("the ingest benchmark measures processes through /proc "
                               "(Linux 4.14+); this system has no /proc/self/smaps_rollup")
        if not interval_s > 0:
            raise ValueError(f"interval_s ({interval_s!r}) must be > 0 seconds")
        self.interval_s = interval_s
        self._tree = ProcessTree(os.getpid())
        self.peak_pss = 0
        self.ray_in_tree = False
        self._first: dict[int, float] = {}  # pid -> CPU seconds when the probe first saw it
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _sample(self, *, memory: bool) -> None:
        with self._lock:
            tree = self._tree.scan()
            for pid, st in tree.items():
                # a pid first seen after the start was born during the block: count from zero
                self._first.setdefault(pid, st.cpu_s if self._thread is None else 0.0)
                self._last[pid] = st.cpu_s
                self.ray_in_tree = self.ray_in_tree or st.name == "raylet"
        if memory:
            self.peak_pss = max(self.peak_pss, sum(_pss(pid) for pid in tree))

    def cpu_seconds(self) -> float:
        """CPU time of the whole tree since the block began, read now."""
        self._sample(memory=False)
        with self._lock:
            return sum(self._last[pid] - self._first[pid] for pid in self._last)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._sample(memory=True)
        except BaseException as exc:  # re-raised on the consuming thread in __exit__
            self._error = exc

    def __enter__(self) -> TreeProbe:
        self._sample(memory=True)
        self._thread = threading.Thread(target=self._run, name="bench-probe", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30.0)
            if self._thread.is_alive():
                raise RuntimeError("the benchmark's resource probe did not stop within 30 s")
        if self._error is not None:
            raise RuntimeError(f"the benchmark's resource probe failed: {self._error!r}") \
                from self._error


def idle_baseline(seconds: float = 4.0, interval_s: float = 0.5) -> dict[str, float]:
    """The tree at rest (an idle Ray included, if this process started one): median PSS in
    MiB and the cores its background work keeps busy. Measured once, printed once."""
    samples = []
    with TreeProbe(interval_s) as probe:
        start, cpu0 = time.perf_counter(), probe.cpu_seconds()
        deadline = start + seconds
        tree = ProcessTree(os.getpid())
        while time.perf_counter() < deadline:
            samples.append(sum(_pss(pid) for pid in tree.scan()))
            time.sleep(interval_s)
        cores = (probe.cpu_seconds() - cpu0) / (time.perf_counter() - start)
    return {"pss_mb": statistics.median(samples) / MIB, "cores": cores,
            "ray_in_tree": probe.ray_in_tree}
