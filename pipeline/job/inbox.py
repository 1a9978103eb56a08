"""Live progress from Train workers to the driver, through one small actor.

Ray Train v2 keeps only checkpointed metrics in ``Result.metrics``; the driver wants every epoch
of every rank as it happens (progress, ``metrics.jsonl``, the profile). Workers push records to
this actor fire-and-forget; the driver drains it while ``fit()`` runs.
"""

from __future__ import annotations

from typing import Any

import ray


@ray.remote(num_cpus=0)
class RunInbox:
    """Lives on the driver node; holds records until the driver drains them."""

    def __init__(self):
        self._pending: list[dict[str, Any]] = []

    def push(self, record: dict[str, Any]) -> None:
        self._pending.append(record)

    def drain(self) -> list[dict[str, Any]]:
        out, self._pending = self._pending, []
        return out
