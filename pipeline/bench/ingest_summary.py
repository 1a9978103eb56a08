"""From the ingest benchmark's runs to what a reader judges: medians, verdicts, ratios, targets.

Pure functions of the plain run records :mod:`pipeline.bench.ingest` produces (driver; no Ray),
so a saved JSON result can be summarised again without running anything. A contender that
fails the physical check (:mod:`pipeline.bench.ingest_check`) gets no ratio: its cells read
INVALID, with the reasons beside the table.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from pipeline.bench.ingest_check import RunFigures, check_contender

OURS = ("feedline", "feedline_cache")
CEILING = "ceiling"
# per run kind (epochs): the figures the summary keeps for every contender
METRICS = ("e2e_sps", "steady_sps", "ttfb_s", "ttfb_later_s", "cpu_ms_per_sample",
           "cores_used", "added_mb")
# contenders whose later epochs skip the decode: the ceiling bounds only their first epoch
CACHED = ("feedline_cache",)
TARGETS = (  # (baseline, metric, bound, text) on the longest run kind
    ("ray_data_tuned", "e2e", 1.2, ">= 1.2x raw Ray Data tuned, end to end"),
    ("dataloader_tuned", "e2e", 1.0, ">= 1.0x DataLoader tuned, end to end"),
    ("ray_data_tuned", "memory", 1.5, "added memory <= 1.5x raw Ray Data tuned's"),
)


def stats(values: Sequence[float | None]) -> dict[str, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None, "n": 0}
    return {"median": statistics.median(present), "min": min(present), "max": max(present),
            "n": len(present)}


def _figures(runs: list[dict[str, Any]]) -> dict[int, list[RunFigures]]:
    out: dict[int, list[RunFigures]] = {}
    for r in runs:
        out.setdefault(r["epochs"], []).append(
            RunFigures(rep=r["rep"], samples_per_s=r["e2e_sps"],
                       cpu_s_per_sample=r["cpu_ms_per_sample"] / 1e3))
    return out


def verdicts(runs: list[dict[str, Any]], contenders: Sequence[str],
             cores: float) -> dict[str, dict[str, Any]]:
    """Every contender's physical check over all its runs."""
    mine = {name: [r for r in runs if r["contender"] == name] for name in contenders}
    ceiling = _figures(mine[CEILING]) if mine.get(CEILING) else None
    out = {}
    for name, own in mine.items():
        if not own:
            continue
        kinds = sorted({r["epochs"] for r in own})
        verdict = check_contender(
            _figures(own), cores=cores, ceiling=None if name == CEILING else ceiling,
            same_work_epochs=[min(kinds)] if name in CACHED else None,
            cpu_visible=all(r["cpu_visible"] for r in own))
        out[name] = {"valid": verdict.valid, "reasons": list(verdict.reasons)}
    return out


def summarize_runs(runs: list[dict[str, Any]],
                   contenders: Sequence[str]) -> dict[str, dict[str, dict[str, Any]]]:
    """``contender -> epochs (as str, for JSON) -> metric -> {median, min, max, n}``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for name in contenders:
        own = [r for r in runs if r["contender"] == name]
        if own:
            out[name] = {str(e): {m: stats([r[m] for r in own if r["epochs"] == e])
                                  for m in METRICS}
                         for e in sorted({r["epochs"] for r in own})}
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def ratios(summary: dict[str, Any], valid: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Feedline's medians ÷ each baseline's: end to end per run kind, and added memory.
    ``"INVALID"`` where either side failed the physical check."""
    out: dict[str, Any] = {}
    for ours in OURS:
        if ours not in summary:
            continue
        out[ours] = {}
        for base, kinds in summary.items():
            if base in OURS:
                continue
            if not (valid[ours]["valid"] and valid[base]["valid"]):
                out[ours][base] = "INVALID"
                continue
            row = {f"e2e_{e}": _ratio(summary[ours][e]["e2e_sps"]["median"],
                                      kinds[e]["e2e_sps"]["median"])
                   for e in kinds if e in summary[ours]}
            longest = max(kinds, key=int)
            row["added_memory"] = _ratio(summary[ours][longest]["added_mb"]["median"],
                                         kinds[longest]["added_mb"]["median"])
            out[ours][base] = row
    return out


def targets(summary: dict[str, Any], ratio: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's acceptance numbers on the longest run, for each Feedline row."""
    out = []
    for ours, bases in ratio.items():
        longest = max(summary[ours], key=int)
        for base, metric, bound, text in TARGETS:
            row = bases.get(base)
            if row is None:
                continue
            value = None if row == "INVALID" else (
                row.get(f"e2e_{longest}") if metric == "e2e" else row["added_memory"])
            met = None if value is None else (value >= bound if metric == "e2e"
                                              else value <= bound)
            out.append({"contender": ours, "target": f"{longest} epochs: {text}"
                        if metric == "e2e" else text,
                        "value": value, "met": met, "invalid": row == "INVALID"})
    return out
