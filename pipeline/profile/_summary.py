"""The phase vocabulary and the per-rank summary: plain numbers in, plain JSON-able dicts out.

A step is split into :data:`PHASES`; ``other`` is derived (step wall minus the named phases), so
the phases of a step always add up to its wall time. Summaries hold, per phase and for the step
wall, the sum, the mean per step and the p50/p99 over steps, in seconds.
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


def summarise(*, rank: int, walls: Sequence[float], phases: Mapping[str, Sequence[float]],
              samples: int) -> dict[str, Any]:
    """One rank's summary of a run of steps (the schema of ``StepProfiler.epoch_summary``)."""
    wall = float(sum(walls))
    return {
        "rank": rank,
        "steps": len(walls),
        "samples": int(samples),
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "step_s": describe(walls),
        "phases": {p: describe(phases.get(p, ())) for p in PHASES},
    }


def combine_summaries(summaries: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """One summary for several epochs of one rank.

    Sums, step counts, samples and wall add up exactly. Percentiles cannot be combined from
    summaries, so p50 is the step-weighted mean of the epochs' p50 and p99 the largest p99 — an
    approximation on the conservative side, stated here so nobody mistakes it for exact.
    """
    items = [s for s in summaries if s.get("steps")]
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

    return {
        "rank": items[0]["rank"],
        "steps": steps,
        "samples": samples,
        "wall_s": wall,
        "samples_per_s": samples / wall if wall > 0 else 0.0,
        "step_s": merge([s["step_s"] for s in items]),
        "phases": {p: merge([s["phases"][p] for s in items]) for p in PHASES},
    }
