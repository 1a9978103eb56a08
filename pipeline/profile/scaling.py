"""Scaling report: per-worker throughput across worker counts, and why it fell (pure).

Answers "per-GPU throughput fell going from 8 to 16 GPUs: why?". Each run is
``{"workers": n, "merged": merge_ranks(...)}`` (optionally ``"samples_per_s"`` to override the
merged rate). Against the run with the fewest workers (the base):

- ``per_worker_samples_per_s`` = job samples/s ÷ workers;
- ``efficiency`` = per-worker throughput ÷ the base's (1.0 is perfect linear scaling);
- ``attribution``: the change of each phase's seconds *per sample on one worker* (step breakdown
  ÷ samples per rank-step, so a different batch size does not distort it). A worker's sample
  costs more exactly when some phase grew; the phases that grew, as shares of the total growth,
  say where the lost throughput went (``attribution_share``; ``main_cause`` the largest).

Efficiency at or above :data:`WELL_SCALED` is reported as scaling well, with no cause named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pipeline.profile._summary import PHASES

WELL_SCALED = 0.95


def scaling_report(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-worker throughput, efficiency vs the smallest worker count, and loss attribution."""
    if not runs:
        raise ValueError("scaling_report: no runs; pass one {'workers', 'merged'} per worker "
                         "count, e.g. from `pipeline bench scaling --workers 1,2,4`")
    rows = sorted((_row(r) for r in runs), key=lambda r: r["workers"])
    base = rows[0]
    out_runs = []
    for row in rows:
        efficiency = (row["per_worker_samples_per_s"] / base["per_worker_samples_per_s"]
                      if base["per_worker_samples_per_s"] > 0 else 0.0)
        delta = {p: row["per_sample_s"][p] - base["per_sample_s"][p] for p in PHASES}
        grown = {p: d for p, d in delta.items() if d > 0}
        total = sum(grown.values())
        shares = {p: d / total for p, d in grown.items()} if total > 0 else {}
        cause = max(shares, key=lambda p: shares[p]) if shares else None
        if row is base:
            note = "base"
        elif efficiency >= WELL_SCALED or cause is None:
            note = f"scales well: {efficiency:.0%} of the per-worker throughput at " \
                   f"{base['workers']} workers"
        else:
            note = (f"per-worker throughput is {efficiency:.0%} of {base['workers']} workers'; "
                    f"{cause} explains {shares[cause]:.0%} of the extra time per sample")
            cause_note = _CAUSES.get(cause)
            if cause_note:
                note += f" ({cause_note})"
        out_runs.append({
            "workers": row["workers"],
            "samples_per_s": row["samples_per_s"],
            "per_worker_samples_per_s": row["per_worker_samples_per_s"],
            "efficiency": efficiency,
            "step_s": row["step_s"],
            "step_breakdown": row["step_breakdown"],
            "attribution": delta,
            "attribution_share": shares,
            "main_cause": None if row is base or efficiency >= WELL_SCALED else cause,
            "explanation": note,
        })
    worst = min(out_runs, key=lambda r: r["efficiency"])
    return {"base_workers": base["workers"], "runs": out_runs,
            "summary": f"{worst['workers']} workers: {worst['explanation']}"}


_CAUSES = {
    "comm_exposed": "gradients take longer to reduce across more workers: "
                    "see `collective.comm_hook` / `collective.bucket_cap_mb`",
    "data_wait": "preprocessing does not keep up with more trainers: raise the "
                 "`data.concurrency` max or add CPU nodes",
    "h2d": "host→device copies got slower: check `transfer.pin_memory` and node placement",
    "other": "time outside the named phases grew (synchronisation, logging)",
}


def _row(run: Mapping[str, Any]) -> dict[str, Any]:
    workers = int(run["workers"])
    if workers < 1:
        raise ValueError(f"scaling_report: workers ({workers}) must be >= 1")
    merged = run["merged"]
    rate = float(run.get("samples_per_s", merged["samples_per_s"]))
    steps, samples = merged["steps"], merged["samples"]
    per_step = samples / steps if steps else 0.0
    breakdown = merged["step_breakdown"]
    return {
        "workers": workers,
        "samples_per_s": rate,
        "per_worker_samples_per_s": rate / workers,
        "step_s": merged["step_s"]["mean"],
        "step_breakdown": dict(breakdown),
        "per_sample_s": {p: (breakdown[p] / per_step if per_step else 0.0) for p in PHASES},
    }
