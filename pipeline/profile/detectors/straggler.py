"""straggler: the one straggler rule, and the verdict built on it.

**The rule** (:func:`straggler_rule`; ``summary.json``'s ``straggler`` through
:func:`pipeline.collective.straggler_summary` and this verdict both use it, nothing else decides
who is a straggler):

- Each rank's *work per step* is its mean step time minus its exposed all-reduce. Every rank's
  step lasts as long as the slowest one's; the difference is time the faster ranks spend waiting
  for it inside the all-reduce, so work is what tells ranks apart.
- Each rank is compared with the median work of the *other* ranks, so two ranks are enough and a
  slow rank does not pull the reference towards itself.
- The rank with the largest ratio (the lowest rank on a tie) is a straggler when that ratio is
  strictly greater than ``profile.straggler_ratio``: exactly at the ratio is not one. One rank
  alone is never one.
- Over a whole run the work is taken over all its steps (all epochs together).

The verdict names the phase holding most of the straggler's extra time (per step, against the
median of the other ranks) and the remedy for that cause. Its *cost* (``Finding.share``) is the
time the other ranks spend waiting for it: its extra work per step times its steps, as a share
of its training phase. :func:`pipeline.profile.diagnose` makes it the verdict only when that cost
exceeds ``profile.straggler_min_fraction`` (a rank 30% slower at 1 ms steps is a straggler by
the rule, and noted, but not what limits the run).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from pipeline.profile._summary import MEASURED_PHASES
from pipeline.profile.detectors.base import Facts, Finding, as_int, change, current, pct

VERDICT = "straggler"


def straggler_rule(work_s: Mapping[Any, float], ratio: float) -> dict[str, Any]:
    """Apply the rule to ``{rank: work seconds per step}``.

    Returns ``{"rank": the slowest rank relative to the others (None with one rank),
    "ratio": its work / the median of the others' (inf when they did none), "reference_s":
    that median, "ratios": {rank: ratio}, "straggler": bool}``.
    """
    if len(work_s) < 2:
        only = next(iter(work_s), None)
        return {"rank": only, "ratio": 1.0, "reference_s": work_s[only] if work_s else 0.0,
                "ratios": dict.fromkeys(work_s, 1.0), "straggler": False}
    ratios, refs = {}, {}
    for rank, work in work_s.items():
        refs[rank] = statistics.median(w for k, w in work_s.items() if k != rank)
        ratios[rank] = (work / refs[rank] if refs[rank] > 0
                        else (float("inf") if work > 0 else 1.0))
    slowest = max(ratios, key=lambda k: (ratios[k], -int(k)))
    return {"rank": slowest, "ratio": ratios[slowest], "reference_s": refs[slowest],
            "ratios": ratios, "straggler": ratios[slowest] > ratio}


def detect(facts: Facts) -> Finding | None:
    ranks = facts.per_rank
    rule = straggler_rule({k: r["work_s"] for k, r in ranks.items()},
                          facts.config.straggler_ratio)
    if not rule["straggler"]:
        return None
    rank, ratio, ref = rule["rank"], rule["ratio"], rule["reference_s"]
    row = ranks[rank]
    others = [r for k, r in ranks.items() if k != rank]
    excess = {p: row["phase_s"][p] - statistics.median(r["phase_s"][p] for r in others)
              for p in (*MEASURED_PHASES, "other") if p != "comm_exposed"}
    cause = max(excess, key=lambda p: excess[p])
    slower = ratio - 1 if ratio != float("inf") else float("inf")
    wall = row["training"]["wall_s"]
    cost = min(1.0, (row["work_s"] - ref) * row["steps"] / wall) if wall > 0 else 0.0
    head = (f"straggler: rank {rank} is {pct(slower)} slower than the median of the other ranks "
            f"({row['work_s']:.3g} s vs {ref:.3g} s of work per step), mostly in {cause} "
            f"(+{excess[cause]:.3g} s); the others wait for it {pct(cost)} of the training "
            f"phase")
    remedy, changes = _remedy(facts, rank, cause)
    evidence = {"rank": int(rank), "slower_by": slower, "straggler_cost_fraction": cost,
                "work_s": row["work_s"],
                "median_work_s": ref, "cause_phase": cause, "excess_s": excess,
                "work_by_rank": {k: r["work_s"] for k, r in ranks.items()},
                "profile.straggler_ratio": facts.config.straggler_ratio,
                "profile.straggler_min_fraction": facts.config.straggler_min_fraction}
    return Finding(verdict=VERDICT, share=cost, evidence=evidence,
                   advice=(f"{head} → {remedy}",), changes=tuple(changes))


def _remedy(facts: Facts, rank: str, cause: str) -> tuple[str, list[dict[str, Any]]]:
    if cause == "data_wait":
        prefetch = as_int(current(facts, "transfer.host_prefetch"))
        if prefetch is not None:
            deeper = f"raise `transfer.host_prefetch` from {prefetch} to {max(2, prefetch * 2)}"
            changes = [change("transfer.host_prefetch", max(2, prefetch * 2),
                              f"rank {rank} waits longer for its batches than the others")]
        else:
            deeper, changes = "raise `transfer.host_prefetch`", []
        return (f"its input arrives slower than the other ranks' (a remote or busier "
                f"preprocessing node): {deeper}, and check its node with `pipeline doctor`",
                changes)
    if cause == "h2d":
        return ("its host→device copies are slower (PCIe/NUMA placement, pageable memory): "
                "set `transfer.pin_memory: true` and check that node with `pipeline doctor`",
                [change("transfer.pin_memory", True,
                        f"rank {rank}'s host→device copies are slower than the others'")]
                if current(facts, "transfer.pin_memory") is False else [])
    workers = as_int(current(facts, "train.num_workers"))
    if workers is not None and workers > 1:
        drop = f"`train.num_workers` from {workers} to {workers - 1}"
        changes = [change("train.num_workers", workers - 1,
                          f"rank {rank} is slower at {cause} and every rank waits for it")]
    else:
        drop, changes = "one fewer `train.num_workers`", []
    return (f"check rank {rank}'s node with `pipeline doctor` (GPU clocks and temperature, "
            f"co-located processes); if it stays slow the job is faster without it: {drop}",
            changes)
