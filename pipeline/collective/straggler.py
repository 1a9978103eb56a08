"""Straggler view: per-rank work gathered each epoch, and which rank holds the rest back.

In synchronous data parallelism every rank waits for the slowest at each all-reduce, so one
slow rank (thermal throttling, a noisy neighbour, a worse PCIe slot) sets the pace for all.
Who counts as a straggler is decided by one rule, documented and implemented once in
:func:`pipeline.profile.detectors.straggler.straggler_rule` (work per step — step time minus
exposed all-reduce — against the median of the other ranks, strictly above
``profile.straggler_ratio``); :func:`straggler_summary` is that rule in ``summary.json``'s shape,
so the summary and the verdict cannot disagree.

:func:`gather_step_times` and :func:`slowest_waits` are collectives (Train worker);
:func:`straggler_summary` is pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist

from pipeline.profile.detectors.straggler import straggler_rule


def gather_step_times(step_s: float, *, device: torch.device | str = "cpu") -> dict[int, float]:
    """Every rank's seconds per step (work, for the straggler rule), on every rank (a
    collective: all ranks must call it)."""
    world = dist.get_world_size()
    mine = torch.tensor([float(step_s)], dtype=torch.float64, device=device)
    out = torch.empty(world, dtype=torch.float64, device=device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, mine)
    return {rank: float(v) for rank, v in enumerate(out.cpu().tolist())}


def slowest_waits(waits: Sequence[float], *, device: torch.device | str = "cpu") -> list[float]:
    """Step by step, the longest of every rank's waits for its batch (a collective: all ranks
    must call it). Ranks with fewer steps count as not waiting on the steps they lack.

    Takes :meth:`pipeline.profile.StepProfiler.step_waits`; what it returns is the
    ``peer_waits`` of :meth:`~pipeline.profile.StepProfiler.epoch_summary`.
    """
    count = torch.tensor([len(waits)], dtype=torch.int64, device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MAX)
    steps = int(count.item())
    if steps == 0:
        return []
    out = torch.zeros(steps, dtype=torch.float64)
    out[:len(waits)] = torch.tensor(list(waits), dtype=torch.float64)
    out = out.to(device)
    dist.all_reduce(out, op=dist.ReduceOp.MAX)
    return out.cpu().tolist()


def straggler_summary(per_rank_step_s: Mapping[int, float], *,
                      straggler_ratio: float = 1.25) -> dict[str, Any]:
    """The straggler rule over ``{rank: work seconds per step}``: the slowest and fastest rank,
    the slowest's ratio to the median of the others (``imbalance``), and whether it is a
    straggler."""
    if not per_rank_step_s:
        raise ValueError("straggler_summary needs at least one rank's step time")
    bad = {r: s for r, s in per_rank_step_s.items() if not s > 0}
    if bad:
        raise ValueError(f"step times must be > 0 seconds; got {bad}")
    rule = straggler_rule(per_rank_step_s, straggler_ratio)
    slowest = rule["rank"]
    fastest = min(per_rank_step_s, key=lambda r: (per_rank_step_s[r], r))
    message = (f"rank {slowest} is a straggler: {per_rank_step_s[slowest]:.3f} s of work per "
               f"step vs {rule['reference_s']:.3f} s, the median of the other ranks "
               f"({rule['ratio']:.2f}x); every rank waits for it at each all-reduce"
               if rule["straggler"] else "")
    return {
        "ranks": len(per_rank_step_s),
        "slowest_rank": slowest,
        "slowest_s": per_rank_step_s[slowest],
        "fastest_rank": fastest,
        "fastest_s": per_rank_step_s[fastest],
        "median_s": rule["reference_s"],
        "imbalance": rule["ratio"],
        "straggler": rule["straggler"],
        "straggler_ratio": straggler_ratio,
        "message": message,
    }
