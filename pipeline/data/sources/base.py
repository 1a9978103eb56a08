"""What every source hands to the dataset builder: a manifest of samples, one row each, and the
files it found but does not read (counted, so nothing is dropped without a word)."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

# skipped files named in summary.json; the count covers them all
SKIPPED_LISTED = 20


@dataclass(frozen=True)
class SourcePlan:
    """Made on the driver. ``manifest`` has an ``id`` column (stable int64) and what a worker
    needs to produce that sample (a file path, or a parquet file and row)."""

    manifest: pa.Table
    classes: tuple[str, ...]
    kind: str  # "image" (decode files) or "table" (rows already hold the values)
    origin: str  # shown in errors and quarantine records
    skipped: tuple[tuple[str, str], ...] = ()  # (path, reason) of files found but not read


def skipped_fields(skipped: tuple[tuple[str, str], ...]) -> dict:
    """summary.json's ``skipped_files`` (how many) and ``skipped`` (the first few, why)."""
    return {"skipped_files": len(skipped),
            "skipped": [{"path": p, "reason": r} for p, r in skipped[:SKIPPED_LISTED]]}


def skipped_warning(plan: SourcePlan) -> str | None:
    """One line for the console: how many files were not read, by reason, with an example."""
    if not plan.skipped:
        return None
    reasons: dict[str, list[str]] = {}
    for path, reason in plan.skipped:
        reasons.setdefault(reason, []).append(path)
    parts = [f"{len(paths)} {reason} (e.g. {paths[0]})" for reason, paths in reasons.items()]
    return (f"{len(plan.skipped)} file(s) under {plan.origin} are not read: {'; '.join(parts)}; "
            f"the run's summary.json lists them under 'skipped'")
