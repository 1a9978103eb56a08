"""straggler: one rank's work per step exceeds ``straggler_ratio`` × the median of the others.

Work is step time minus exposed all-reduce (see :mod:`pipeline.profile.merge`): every rank's step
lasts as long as the slowest one's, the difference is waiting in the all-reduce on the others.
Each rank is compared with the median of the *other* ranks, so two ranks are enough and the slow
rank does not pull the reference towards itself. The phase holding most of the extra time is the
cause named in the advice. Exactly at the ratio is not a straggler.
"""

from __future__ import annotations

import statistics

from pipeline.profile._summary import MEASURED_PHASES
from pipeline.profile.detectors.base import Facts, Finding, current, pct

VERDICT = "straggler"


def detect(facts: Facts) -> Finding | None:
    ranks = facts.per_rank
    if len(ranks) < 2:
        return None
    ratios = {}
    for rank, row in ranks.items():
        others = [r["work_s"] for k, r in ranks.items() if k != rank]
        ref = statistics.median(others)
        ratios[rank] = row["work_s"] / ref if ref > 0 else float("inf")
    rank = max(ratios, key=lambda k: (ratios[k], -int(k)))
    ratio = ratios[rank]
    if not ratio > facts.config.straggler_ratio:
        return None
    row = ranks[rank]
    others = [r for k, r in ranks.items() if k != rank]
    ref = statistics.median(r["work_s"] for r in others)
    excess = {p: row["phase_s"][p] - statistics.median(r["phase_s"][p] for r in others)
              for p in (*MEASURED_PHASES, "other") if p != "comm_exposed"}
    cause = max(excess, key=lambda p: excess[p])
    slower = ratio - 1 if ratio != float("inf") else float("inf")
    head = (f"straggler: rank {rank} is {pct(slower)} slower than the median of the other ranks "
            f"({row['work_s']:.3g} s vs {ref:.3g} s of work per step), mostly in {cause} "
            f"(+{excess[cause]:.3g} s)")
    advice = (head + " → " + _remedy(facts, rank, cause),)
    evidence = {"rank": int(rank), "slower_by": slower, "work_s": row["work_s"],
                "median_work_s": ref, "cause_phase": cause, "excess_s": excess,
                "work_by_rank": {k: r["work_s"] for k, r in ranks.items()},
                "profile.straggler_ratio": facts.config.straggler_ratio}
    return Finding(verdict=VERDICT, share=slower, evidence=evidence, advice=advice)


def _remedy(facts: Facts, rank: str, cause: str) -> str:
    if cause == "data_wait":
        prefetch = current(facts, "data.prefetch_batches")
        if isinstance(prefetch, int) and not isinstance(prefetch, bool):
            deeper = f"raise `data.prefetch_batches` from {prefetch} to {max(2, prefetch * 2)}"
        else:
            deeper = "raise `data.prefetch_batches`"
        return (f"its input arrives slower than the other ranks' (a remote or busier "
                f"preprocessing node): {deeper}, and check its node with `pipeline doctor`")
    if cause == "h2d":
        return ("its host→device copies are slower (PCIe/NUMA placement, pageable memory): "
                "set `transfer.pin_memory: true` and check that node with `pipeline doctor`")
    workers = current(facts, "train.num_workers")
    drop = (f"`train.num_workers` from {workers} to {workers - 1}"
            if isinstance(workers, int) and not isinstance(workers, bool) and workers > 1
            else "one fewer `train.num_workers`")
    return (f"check rank {rank}'s node with `pipeline doctor` (GPU clocks and temperature, "
            f"co-located processes); if it stays slow the job is faster without it: {drop}")
