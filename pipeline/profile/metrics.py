"""Prometheus metrics through ``ray.util.metrics``: the Ray dashboard and Grafana show them.

Exported by every node's Ray metrics agent (``/metrics`` on the node's metrics export port),
with Ray's own tags plus ours. Updated from the Train worker loop at most every
:data:`UPDATE_EVERY_S` seconds so recording costs nothing per step.

=================================  =========  ===========  =========================================
name                               type       tags         meaning
=================================  =========  ===========  =========================================
feedline_samples_per_second        gauge      run, rank    training samples/s of this rank
feedline_data_wait_fraction        gauge      run, rank    share of step time waiting for data
feedline_step_seconds              histogram  run, rank    wall time of one training step
feedline_h2d_bytes_total           counter    run, rank    bytes moved host → device
feedline_bad_samples_total         counter    run          samples dropped and quarantined
=================================  =========  ===========  =========================================
"""

from __future__ import annotations

import time

UPDATE_EVERY_S = 2.0
STEP_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]


class TrainMetrics:
    """One per Train worker (not picklable: build it inside the worker)."""

    def __init__(self, run: str, rank: int):
        from ray.util.metrics import Counter, Gauge, Histogram

        keys = ("run", "rank")
        self._tags = {"run": run, "rank": str(rank)}
        self.samples_per_second = Gauge("feedline_samples_per_second",
                                        "training samples/s of this rank", tag_keys=keys)
        self.data_wait_fraction = Gauge("feedline_data_wait_fraction",
                                        "share of step time waiting for data", tag_keys=keys)
        self.step_seconds = Histogram("feedline_step_seconds", "wall time of one training step",
                                      boundaries=STEP_BUCKETS, tag_keys=keys)
        self.h2d_bytes = Counter("feedline_h2d_bytes_total", "bytes moved host to device",
                                 tag_keys=keys)
        self._last = time.perf_counter()
        self._samples = 0
        self._wait = self._busy = 0.0
        self._bytes = 0

    def step(self, *, samples: int, step_s: float, wait_s: float, h2d_bytes: int) -> None:
        """Account one step (``h2d_bytes``: moved for this step); publish every few seconds."""
        self._samples += samples
        self._wait += wait_s
        self._busy += step_s
        self._bytes += h2d_bytes
        self.step_seconds.observe(step_s, tags=self._tags)
        now = time.perf_counter()
        if now - self._last >= UPDATE_EVERY_S:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        now = now or time.perf_counter()
        elapsed = now - self._last
        if elapsed > 0 and self._samples:
            self.samples_per_second.set(self._samples / elapsed, tags=self._tags)
        if self._busy > 0:
            self.data_wait_fraction.set(min(1.0, self._wait / self._busy), tags=self._tags)
        if self._bytes:
            self.h2d_bytes.inc(self._bytes, tags=self._tags)
        self._last, self._samples, self._wait, self._busy, self._bytes = now, 0, 0.0, 0.0, 0


def bad_samples_counter():
    """The run's bad-sample counter (tags: run), incremented by the quarantine actor."""
    from ray.util.metrics import Counter

    return Counter("feedline_bad_samples_total", "samples dropped and quarantined",
                   tag_keys=("run",))
