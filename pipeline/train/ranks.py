"""What the ranks of a job agree on, as the loop asks it: torch.distributed collectives over the
job's process group; on one rank (or without a group) each is the identity (Train worker; no
Ray). Every rank must call the same ones in the same order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from pipeline.collective import gather_step_times
from pipeline.collective.straggler import slowest_waits


class Ranks:
    def __init__(self, device: torch.device, world: int | None = None) -> None:
        self.device = device
        self.world = world if world is not None else (
            dist.get_world_size() if dist.is_initialized() else 1)

    @property
    def _group(self) -> bool:
        return self.world > 1 and dist.is_initialized()

    def _reduce(self, values: Sequence[Any], op: Any) -> list[float]:
        if not values:
            return []
        t = torch.stack([torch.as_tensor(v, device=self.device).detach().to(torch.float64)
                         .reshape(()) for v in values])
        if self._group:
            dist.all_reduce(t, op=op)
        return t.tolist()

    def sum(self, values: Sequence[Any]) -> list[float]:
        """Each value (a number or a one-element tensor) summed over the ranks."""
        return self._reduce(values, dist.ReduceOp.SUM)

    def min(self, values: Sequence[Any]) -> list[float]:
        """Each value's smallest over the ranks."""
        return self._reduce(values, dist.ReduceOp.MIN)

    def gather(self, value: Any) -> list[Any]:
        """Every rank's ``value`` (picklable), in rank order."""
        if not self._group:
            return [value]
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, value)
        return out

    def slowest_waits(self, waits: Sequence[float]) -> list[float] | None:
        """Step by step, the longest wait of any rank for its batch; None on one rank."""
        return slowest_waits(waits, device=self.device) if self._group else None

    def step_times(self, work: float) -> dict[int, float]:
        """Every rank's seconds of work per step, by rank."""
        return gather_step_times(work, device=self.device) if self._group else {0: work}
