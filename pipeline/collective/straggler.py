"""Straggler view: per-rank step times gathered each epoch, and which rank holds the rest back.

In synchronous data parallelism every rank waits for the slowest at each all-reduce, so one
slow rank (thermal throttling, a noisy neighbour, a worse PCIe slot) sets the pace for all.
:func:`gather_step_times` is the collective (Train worker); :func:`straggler_summary` is pure.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist


def gather_step_times(step_s: float, *, device: torch.device | str = "cpu") -> dict[int, float]:
    """Every rank's mean step time, on every rank (a collective: all ranks must call it)."""
    world = dist.get_world_size()
    mine = torch.tensor([float(step_s)], dtype=torch.float64, device=device)
    out = torch.empty(world, dtype=torch.float64, device=device)
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    gather(out, mine)
    return {rank: float(v) for rank, v in enumerate(out.cpu().tolist())}


def straggler_summary(per_rank_step_s: Mapping[int, float], *,
                      straggler_ratio: float = 1.25) -> dict[str, Any]:
    """Slowest and fastest rank, imbalance (slowest / median) and whether it is a straggler."""
    if not per_rank_step_s:
        raise ValueError("straggler_summary needs at least one rank's step time")
    bad = {r: s for r, s in per_rank_step_s.items() if not s > 0}
    if bad:
        raise ValueError(f"step times must be > 0 seconds; got {bad}")
    slowest = max(per_rank_step_s, key=lambda r: (per_rank_step_s[r], -r))
    fastest = min(per_rank_step_s, key=lambda r: (per_rank_step_s[r], r))
    median = statistics.median(per_rank_step_s.values())
    imbalance = per_rank_step_s[slowest] / median
    is_straggler = len(per_rank_step_s) > 1 and imbalance >= straggler_ratio
    message = (f"rank {slowest} is a straggler: {per_rank_step_s[slowest]:.3f} s/step vs median "
               f"{median:.3f} s ({imbalance:.2f}x); every rank waits for it at each all-reduce"
               if is_straggler else "")
    return {
        "ranks": len(per_rank_step_s),
        "slowest_rank": slowest,
        "slowest_s": per_rank_step_s[slowest],
        "fastest_rank": fastest,
        "fastest_s": per_rank_step_s[fastest],
        "median_s": median,
        "imbalance": imbalance,
        "straggler": is_straggler,
        "message": message,
    }
