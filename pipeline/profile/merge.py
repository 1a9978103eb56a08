"""Driver side: merge every rank's summary into the job's step breakdown (pure).

Job-level numbers are means over ranks of per-rank shares, so a 2-rank and a 16-rank run read the
same way: ``fraction[phase]`` is the share of step time rank by rank, averaged. Per-rank numbers
are kept for straggler detection and the per-rank bars of ``breakdown.png``.

The merged dict (``profile.json`` → ``merged``, and the source of the ``summary.json`` fields)::

    {"ranks": [0, 1], "steps": 40, "samples": 2560, "wall_s": 3.1, "samples_per_s": 830.0,
     "step_s": {"mean": .., "p50": .., "p99": ..},            # p50: median of ranks, p99: max
     "phases": {phase: {"per_step_s": .., "fraction": .., "p50": .., "p99": ..}},
     "data_wait_fraction": .., "comm_exposed_fraction": ..,
     "step_breakdown": {phase: mean seconds per step},
     "per_rank": {"0": {"steps", "samples", "wall_s", "samples_per_s", "step_s",
                        "work_s", "phase_s": {phase: s/step}, "fractions": {phase: share}}}}

``work_s`` is a rank's mean step time minus its exposed all-reduce: in synchronous data-parallel
training every rank's step takes as long as the slowest rank's, and the difference shows up as
exposed communication on the faster ones, so work is what tells ranks apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from pipeline.profile._summary import PHASES


def merge_ranks(rank_summaries: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """Merge ``{rank: epoch_summary}`` (rank keys may be ints or JSON strings) into one dict."""
    ranks = {int(r): s for r, s in rank_summaries.items() if s.get("steps", 0) > 0}
    if not ranks:
        raise ValueError("merge_ranks: no rank reported a profiled step; check that "
                         "profile.enabled is true and that each worker calls step_done()")
    per_rank: dict[str, dict[str, Any]] = {}
    for rank in sorted(ranks):
        s = ranks[rank]
        steps, wall = s["steps"], s["wall_s"]
        phase_s = {p: s["phases"][p]["sum"] / steps for p in PHASES}
        per_rank[str(rank)] = {
            "steps": steps,
            "samples": s["samples"],
            "wall_s": wall,
            "samples_per_s": s["samples"] / wall if wall > 0 else 0.0,
            "step_s": {"mean": wall / steps, "p50": s["step_s"]["p50"],
                       "p99": s["step_s"]["p99"]},
            "work_s": wall / steps - phase_s["comm_exposed"],
            "phase_s": phase_s,
            "fractions": {p: (s["phases"][p]["sum"] / wall if wall > 0 else 0.0)
                          for p in PHASES},
        }
    rows = list(per_rank.values())

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    phases = {
        p: {
            "per_step_s": mean([r["phase_s"][p] for r in rows]),
            "fraction": mean([r["fractions"][p] for r in rows]),
            "p50": statistics.median(ranks[k]["phases"][p]["p50"] for k in ranks),
            "p99": max(ranks[k]["phases"][p]["p99"] for k in ranks),
        }
        for p in PHASES
    }
    wall = max(r["wall_s"] for r in rows)
    return {
        "ranks": sorted(ranks),
        "steps": sum(r["steps"] for r in rows),
        "samples": sum(r["samples"] for r in rows),
        "wall_s": wall,
        # Ranks run concurrently: the job's rate is the sum of the ranks' rates.
        "samples_per_s": sum(r["samples_per_s"] for r in rows),
        "step_s": {
            "mean": mean([r["step_s"]["mean"] for r in rows]),
            "p50": statistics.median(r["step_s"]["p50"] for r in rows),
            "p99": max(r["step_s"]["p99"] for r in rows),
        },
        "phases": phases,
        "data_wait_fraction": phases["data_wait"]["fraction"],
        "comm_exposed_fraction": phases["comm_exposed"]["fraction"],
        "step_breakdown": {p: phases[p]["per_step_s"] for p in PHASES},
        "per_rank": per_rank,
    }
