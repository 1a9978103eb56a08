"""Live progress from Train workers to the driver, through one small actor.

Ray Train v2 keeps only checkpointed metrics in ``Result.metrics``; the driver wants every epoch
of every rank as it happens (progress, ``metrics.jsonl``, the profile). Workers send their
messages (:mod:`pipeline.messages`) to this actor fire-and-forget; the driver drains it while
``fit()`` runs.
"""

from __future__ import annotations

from typing import Any

import ray

from pipeline.data.quarantine import QuarantineRecords
from pipeline.messages import Message


@ray.remote(num_cpus=0)
class RunInbox(QuarantineRecords):
    """Lives on the driver node; holds records until the driver drains them, and the run's
    quarantine (:class:`~pipeline.data.quarantine.QuarantineRecords`: the readers' bad samples)."""

    def __init__(self, run: str = "run"):
        super().__init__(run)
        self._pending: list[Message] = []

    def push(self, message: Message) -> None:
        self._pending.append(message)

    def drain(self) -> list[Message]:
        out, self._pending = self._pending, []
        return out

    # -- the other way: the decode pool's CPU limit, set by the driver's elastic controller and
    # read by the process that runs the training dataset (pipeline.pool.live_limits)

    _pool_cpus = float("inf")

    def set_pool_cpus(self, cpus: float) -> None:
        self._pool_cpus = cpus

    def pool_cpus(self) -> float:
        return self._pool_cpus

    # the last epoch whose totals the controller judged: a streamed epoch's ranks wait for it
    # before the next execution starts, so that one starts with the pool the verdict set
    _judged = 0

    def set_judged(self, epoch: int) -> None:
        self._judged = max(self._judged, epoch)

    def judged(self) -> int:
        return self._judged

    # -- the worker groups' placement groups, told by Ray Train's controller, for the driver to
    # remove should the controller die first (pipeline.job.abortable)

    _placement_groups: tuple[Any, ...] = ()

    def add_placement_group(self, group: Any) -> None:
        self._placement_groups = (*self._placement_groups, group)

    def placement_groups(self) -> tuple[Any, ...]:
        return self._placement_groups
