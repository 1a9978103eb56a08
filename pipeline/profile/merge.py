"""Driver side: merge every rank's summary into the job's breakdown (pure).

Job-level numbers are means over ranks of per-rank shares, so a 2-rank and a 16-rank run read the
same way. Two views (see :mod:`pipeline.profile._summary`):

- **Steps**: ``fraction[phase]`` is the share of step time rank by rank, averaged; the
  steady-state view, ``step_breakdown`` in ``summary.json``.
- **Training**: ``training`` splits every second of the training phase (first epoch's start-up
  to the last checkpoint) into :data:`~pipeline.profile._summary.TRAINING_PHASES`, and into the
  *costs* the diagnosis weighs (each a share of the training wall; they add up to 1)::

      input          data_wait + the all-reduce time peers spent waiting for that wait
      startup        startup   + the all-reduce time peers spent waiting for that start-up
      communication  comm_exposed minus both of the above
      transfer       h2d
      compute        forward + backward + optimizer
      validation, report, checkpoint
      unexplained    other + untracked

  In synchronous data parallelism a rank whose peer is still waiting for its batch waits for it
  inside the all-reduce; the profiler charges that wait, step by step, to the peer's cause
  (``input_comm_s``, ``startup_comm_s``), so an input-bound run reads as input-bound on every
  rank instead of half input, half communication.

The merged dict (``profile.json`` → ``merged``, and the source of the ``summary.json`` fields)::

    {"ranks": [0, 1], "steps": 40, "samples": 2560, "wall_s": 3.1, "samples_per_s": 830.0,
     "step_s": {"mean": .., "p50": .., "p99": ..},            # p50: median of ranks, p99: max
     "phases": {phase: {"per_step_s": .., "fraction": .., "p50": .., "p99": ..}},
     "data_wait_fraction": .., "comm_exposed_fraction": ..,
     "step_breakdown": {phase: mean seconds per step},
     "per_rank": {"0": {"steps", "samples", "wall_s", "samples_per_s", "step_s",
                        "work_s", "phase_s": {phase: s/step}, "fractions": {phase: share},
                        "training": {"wall_s", "phases": {phase: s}, "shares": {phase: share},
                                     "costs": {cost: share}, "input_comm_s", "startup_comm_s",
                                     "epochs": {"1": {"wall_s", "phases": {phase: s}}}}}},
     "training": {"wall_s": .., "explained": .., "phases": {phase: {"seconds", "share"}},
                  "costs": {cost: share}, "epochs": {"1": {"wall_s", "shares"}}}}

``work_s`` is a rank's mean step time minus its exposed all-reduce: in synchronous data-parallel
training every rank's step takes as long as the slowest rank's, and the difference shows up as
exposed communication on the faster ones, so work is what tells ranks apart.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from pipeline.profile._summary import (
    COMPUTE_PHASES,
    PHASES,
    TRAINING_PHASES,
    UNEXPLAINED_PHASES,
    training_of,
)

#: The costs of the training phase the diagnosis weighs, in the order they are shown.
COSTS: tuple[str, ...] = ("input", "startup", "communication", "transfer", "compute",
                          "validation", "report", "checkpoint", "unexplained")


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
            "training": _rank_training(training_of(s)),
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
        "training": _job_training([r["training"] for r in rows]),
    }


def costs_of(phases: Mapping[str, float], wall_s: float, *, input_comm_s: float = 0.0,
             startup_comm_s: float = 0.0) -> dict[str, float]:
    """The :data:`COSTS` of one rank's training phase, as shares of its wall (they add up to 1
    when ``phases`` do)."""
    if wall_s <= 0:
        return dict.fromkeys(COSTS, 0.0)
    comm = phases.get("comm_exposed", 0.0)
    # Never charge more to the peers' waits than the exposed all-reduce held.
    input_comm = min(input_comm_s, comm)
    startup_comm = min(startup_comm_s, comm - input_comm)
    seconds = {
        "input": phases.get("data_wait", 0.0) + input_comm,
        "startup": phases.get("startup", 0.0) + startup_comm,
        "communication": comm - input_comm - startup_comm,
        "transfer": phases.get("h2d", 0.0),
        "compute": sum(phases.get(p, 0.0) for p in COMPUTE_PHASES),
        "validation": phases.get("validation", 0.0),
        "report": phases.get("report", 0.0),
        "checkpoint": phases.get("checkpoint", 0.0),
        "unexplained": sum(phases.get(p, 0.0) for p in UNEXPLAINED_PHASES),
    }
    return {c: v / wall_s for c, v in seconds.items()}


def _rank_training(training: Mapping[str, Any]) -> dict[str, Any]:
    wall = float(training["wall_s"])
    phases = {p: float(training["phases"].get(p, 0.0)) for p in TRAINING_PHASES}
    epochs: dict[str, dict[str, Any]] = {}
    for window in training.get("windows", ()):
        # The run's tail (last report and checkpoint) carries the last epoch's label.
        key = str(window.get("epoch"))
        row = epochs.setdefault(key, {"wall_s": 0.0, "phases": dict.fromkeys(TRAINING_PHASES,
                                                                             0.0)})
        row["wall_s"] += float(window["wall_s"])
        for p in TRAINING_PHASES:
            row["phases"][p] += float(window["phases"].get(p, 0.0))
    return {
        "wall_s": wall,
        "phases": phases,
        "shares": {p: (v / wall if wall > 0 else 0.0) for p, v in phases.items()},
        "costs": costs_of(phases, wall, input_comm_s=training.get("input_comm_s", 0.0),
                          startup_comm_s=training.get("startup_comm_s", 0.0)),
        "input_comm_s": float(training.get("input_comm_s", 0.0)),
        "startup_comm_s": float(training.get("startup_comm_s", 0.0)),
        "epochs": epochs,
    }


def _job_training(rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    costs = {c: mean([r["costs"][c] for r in rows]) for c in COSTS}
    labels = sorted({k for r in rows for k in r["epochs"]}, key=_epoch_order)
    epochs = {}
    for label in labels:
        have = [r["epochs"][label] for r in rows if label in r["epochs"]]
        epochs[label] = {
            "wall_s": mean([e["wall_s"] for e in have]),
            "shares": {p: mean([e["phases"][p] / e["wall_s"] if e["wall_s"] > 0 else 0.0
                                for e in have]) for p in TRAINING_PHASES},
        }
    return {
        "wall_s": max(r["wall_s"] for r in rows),
        "mean_wall_s": mean([r["wall_s"] for r in rows]),
        "explained": 1.0 - costs["unexplained"],
        "phases": {p: {"seconds": mean([r["phases"][p] for r in rows]),
                       "share": mean([r["shares"][p] for r in rows])} for p in TRAINING_PHASES},
        "costs": costs,
        "epochs": epochs,
    }


def _epoch_order(label: str) -> tuple[int, str]:
    return (int(label), "") if label.isdigit() else (1 << 30, label)
