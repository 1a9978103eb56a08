"""The run's quarantine: where preprocessing workers on any node send the samples they dropped.

The records live in a small Ray actor placed with the driver (0 CPUs): a ``pipeline run``'s
inbox (:class:`pipeline.job.inbox.RunInbox` holds them, one actor process fewer per run), or a
:class:`QuarantineLog` of its own for :func:`pipeline.batches`. Workers send records
fire-and-forget; the driver reads them back to write ``quarantine.jsonl``, count bad samples and
enforce ``data.max_bad_fraction``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import ray


class QuarantineRecords:
    """Collects ``{id, source, stage, error_type, message}`` records (an actor's state)."""

    def __init__(self, run: str = "run"):
        from pipeline.profile.metrics import bad_samples_counter

        self._records: dict[int, dict[str, Any]] = {}
        self._counter = bad_samples_counter()
        self._tags = {"run": run}
        self._failure = ""

    def add(self, records: list[dict[str, Any]]) -> None:
        new = 0
        for record in records:  # a re-executed task reports the same id again: keep one
            if int(record["id"]) not in self._records:
                self._records[int(record["id"])] = record
                new += 1
        if new:
            self._counter.inc(new, tags=self._tags)

    def fail(self, message: str) -> None:
        """A reader hit a threshold; keep the first message so the driver can report it whole
        (Ray truncates worker tracebacks in the error it raises on the driver)."""
        self._failure = self._failure or message

    def failure(self) -> str:
        return self._failure

    def count(self) -> int:
        return len(self._records)

    def records(self) -> list[dict[str, Any]]:
        return [self._records[k] for k in sorted(self._records)]


@ray.remote(num_cpus=0)
class QuarantineLog(QuarantineRecords):
    """The quarantine's own actor; lives on the driver node."""


def write_quarantine(records: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w") as fh:
        for record in records:
            fh.write(json.dumps(record) + "\n")


def check_bad_fraction(count: int, total: int, limit: float, origin: str,
                       records: list[dict[str, Any]]) -> None:
    """Raise when more than ``limit`` of all the run's samples were bad, naming the first."""
    from pipeline.data.udf.reader import BadSampleThresholdError, bad_fraction_message

    if total and count / total > limit:
        raise BadSampleThresholdError(bad_fraction_message(limit, count, total, origin, records))
