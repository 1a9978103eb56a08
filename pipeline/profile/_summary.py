"""The phase vocabulary and the per-rank summary: plain numbers in, plain JSON-able dicts out.

Two views of one rank's time, both in seconds:

- **Steps.** A step is split into :data:`PHASES`; ``other`` is derived (step wall minus the named
  phases), so a step's phases add up to its wall. ``phases`` holds, per phase and for the step
  wall, the sum, the mean per step and the p50/p99 over steps: the steady-state view.
- **The training phase.** Every second from the first epoch's start-up to the last checkpoint,
  split into :data:`TRAINING_PHASES`: the step phases (summed over steps, plus the epoch's last
  ``data_wait`` that ends in "no more batches" and so belongs to no step), the out-of-step phases
  (:data:`OUT_OF_STEP_PHASES`) and ``untracked``, derived: the wall minus everything else (time
  outside steps and outside the named out-of-step phases). ``training.phases`` add up to
  ``training.wall_s`` exactly; ``other`` and ``untracked`` together are the *unexplained* time.

``training.input_comm_s`` and ``training.startup_comm_s`` are the parts of ``comm_exposed`` that
were waiting in the all-reduce for a peer that was still waiting for its batch (its data wait,
or its epoch start-up), step by step; see :meth:`pipeline.profile.StepProfiler.epoch_summary`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Named phases in the order they occur in a step (and are stacked in plots).
PHASES: tuple[str, ...] = (
    "data_wait", "h2d", "forward", "backward", "comm_exposed", "optimizer", "other")

#: Phases a span or ``add`` may name; ``other`` is always derived.
MEASURED_PHASES: tuple[str, ...] = PHASES[:-1]

#: Phases that are the model's own work, as opposed to waiting for input or peers.
COMPUTE_PHASES: tuple[str, ...] = ("forward", "backward", "optimizer")

#: Phases outside steps, timed with ``StepProfiler.phase``: the epoch's wait for its first batch,
#: validation, reporting (collectives and pushes to the driver) and checkpoint saves.
OUT_OF_STEP_PHASES: tuple[str, ...] = ("startup", "validation", "report", "checkpoint")

#: Every phase of the training wall, in the order they occur in an epoch.
TRAINING_PHASES: tuple[str, ...] = (
    "startup", *PHASES, "validation", "report", "checkpoint", "untracked")

#: Phases that name no activity: time the profile cannot attribute.
UNEXPLAINED_PHASES: tuple[str, ...] = ("other", "untracked")

#: Timeline tracks of one rank: the whole step, then one per phase.
TRACKS: tuple[str, ...] = ("step", *PHASES, *OUT_OF_STEP_PHASES)


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation, like numpy's default; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def describe(values: Sequence[float]) -> dict[str, float]:
    """``{"sum", "mean", "p50", "p99"}`` of per-step seconds."""
    total = float(sum(values))
    return {
        "sum": total,
        "mean": total / len(values) if values else 0.0,
        "p50": percentile(values, 0.50),
        "p99": percentile(values, 0.99),
    }


def training_block(*, wall_s: float, phases: Mapping[str, float], input_comm_s: float = 0.0,
                   startup_comm_s: float = 0.0, epoch: int | None = None) -> dict[str, Any]:
    """The ``training`` part of a summary: ``phases`` (any of :data:`TRAINING_PHASES` but
    ``untracked``, which is derived here) over ``wall_s``, and one window labelled ``epoch``."""
    out = {p: float(phases.get(p, 0.0)) for p in TRAINING_PHASES if p != "untracked"}
    out["untracked"] = max(0.0, float(wall_s) - sum(out.values()))
    # A wall shorter than the phases can only be rounding (all marks come from one clock).
    wall = max(float(wall_s), sum(out.values()))
    return {"wall_s": wall, "phases": out, "input_comm_s": float(input_comm_s),
            "startup_comm_s": float(startup_comm_s),
            "windows": [{"epoch": epoch, "wall_s": wall, "phases": dict(out)}]}


def summarise(*, rank: int, walls: Sequence[float], phases: Mapping[str, Sequence[float]],
              samples: int, training: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One rank's summary (the schema of ``StepProfiler.epoch_summary``).

    Without ``training`` (a :func:`training_block`), the training phase is the steps alone.
    """
    wall = float(sum(walls))
    if training is None:
        training = training_block(wall_s=wall, phases={p: sum(phases.get(p, ())) for p in PHASES})
    return {
        "rank": rank,
        "steps": len(walls),
        "samples": int(samples),
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "step_s": describe(walls),
        "phases": {p: describe(phases.get(p, ())) for p in PHASES},
        "training": dict(training),
    }


def training_of(summary: Mapping[str, Any]) -> dict[str, Any]:
    """The ``training`` block of a summary; summaries written before it existed (profile.json
    of older runs) get one made of their steps alone."""
    training = summary.get("training")
    if training is not None:
        return dict(training)
    return training_block(wall_s=summary["wall_s"],
                          phases={p: summary["phases"][p]["sum"] for p in PHASES})


def combine_summaries(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary for several epochs (windows) of one rank.

    Sums, step counts, samples, walls and the training phase add up exactly; windows without
    steps (the run's tail: the last report and checkpoint) count in the training phase only.
    Percentiles cannot be combined from summaries, so p50 is the step-weighted mean of the
    epochs' p50 and p99 the largest p99 — an approximation on the conservative side, stated here
    so nobody mistakes it for exact.
    """
    every = list(summaries)
    items = [s for s in every if s.get("steps")]
    if not items:
        raise ValueError("combine_summaries: no summary with steps > 0; was profile.enabled "
                         "false or did the epochs make no steps?")
    steps = sum(s["steps"] for s in items)
    wall = sum(s["wall_s"] for s in items)
    samples = sum(s["samples"] for s in items)

    def merge(parts: list[Mapping[str, float]]) -> dict[str, float]:
        total = sum(p["sum"] for p in parts)
        return {
            "sum": total,
            "mean": total / steps,
            "p50": sum(p["p50"] * s["steps"] for p, s in zip(parts, items, strict=True)) / steps,
            "p99": max(p["p99"] for p in parts),
        }

    blocks = [training_of(s) for s in every]
    training = {
        "wall_s": sum(b["wall_s"] for b in blocks),
        "phases": {p: sum(b["phases"].get(p, 0.0) for b in blocks) for p in TRAINING_PHASES},
        "input_comm_s": sum(b.get("input_comm_s", 0.0) for b in blocks),
        "startup_comm_s": sum(b.get("startup_comm_s", 0.0) for b in blocks),
        "windows": [w for b in blocks for w in b.get("windows", ())],
    }
    return {
        "rank": items[0]["rank"],
        "steps": steps,
        "samples": samples,
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "step_s": merge([s["step_s"] for s in items]),
        "phases": {p: merge([s["phases"][p] for s in items]) for p in PHASES},
        "training": training,
    }
