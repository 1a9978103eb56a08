"""``RUN_DIR/profile.json``: everything ``pipeline report`` needs to redo the diagnosis and plots.

Written once by the driver at the end of a run (:func:`save_profile`), read back by
:func:`load_profile`. Version 1::

    {
      "version": 1,
      "ranks":      {"0": summary, ...},         # combine_summaries of a rank's windows
      "merged":     merge_ranks(ranks),          # see pipeline.profile.merge
      "data_ops":   [{"operator", "rows", "busy_s", "blocked_s", "tasks", "wall_s"}, ...],
      "throughput": [{"time_s", "samples_per_s", "rank"?, "epoch"?}, ...],
      "context":    {"data.concurrency": [1, 2], "collective.comm_hook": "none", ...,
                     "device": "cpu"},            # current settings, for the advice
      "events":     {"0": [chrome trace events], ...},  # StepProfiler.trace_events() per rank
      "diagnosis":  {"verdict", "evidence", "advice", "changes"}   # optional: the run's verdict
    }

JSON object keys are strings; :func:`load_profile` turns rank keys back into ints. Summaries and
merged dicts gained a ``training`` section (every second of the training phase) within version
1; a profile written before it is re-merged from its ranks on load, with the training phase made
of the steps alone.
:func:`summary_fields` gives the keys ``summary.json`` gains.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.profile.diagnosis import Diagnosis
from pipeline.profile.merge import merge_ranks

PROFILE_FILE = "profile.json"
VERSION = 1
_REQUIRED = ("ranks", "merged")


@dataclass(frozen=True, kw_only=True)
class SavedProfile:
    """The content of ``profile.json`` with integer rank keys."""

    ranks: dict[int, dict[str, Any]]
    merged: dict[str, Any]
    data_ops: list[dict[str, Any]] = field(default_factory=list)
    throughput: list[dict[str, Any]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    events: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    diagnosis: dict[str, Any] | None = None
    pool: dict[str, Any] = field(default_factory=dict)  # the decode pool controller's record


def save_profile(run_dir: str | Path, *, ranks: Mapping[int, Mapping[str, Any]],
                 merged: Mapping[str, Any], data_ops: Sequence[Mapping[str, Any]] = (),
                 throughput: Sequence[Mapping[str, Any]] = (),
                 context: Mapping[str, Any] | None = None,
                 events: Mapping[int, Sequence[Mapping[str, Any]]] | None = None,
                 diagnosis: Diagnosis | None = None,
                 pool: Mapping[str, Any] | None = None) -> Path:
    """Write ``run_dir/profile.json`` atomically; returns its path."""
    doc = {
        "version": VERSION,
        "ranks": {str(r): dict(s) for r, s in ranks.items()},
        "merged": dict(merged),
        "data_ops": [dict(op) for op in data_ops],
        "throughput": [dict(p) for p in throughput],
        "context": dict(context or {}),
        "events": {str(r): list(e) for r, e in (events or {}).items()},
        "pool": dict(pool or {}),
    }
    if diagnosis is not None:
        doc["diagnosis"] = diagnosis.as_dict()
    path = Path(run_dir) / PROFILE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc))
    tmp.replace(path)
    return path


def load_profile(run_dir: str | Path) -> SavedProfile:
    """Read ``run_dir/profile.json``; errors name the file and what is wrong with it."""
    path = Path(run_dir) / PROFILE_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no profile in this run directory; was the run made "
                                f"with profile.enabled: true, and did it finish?")
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc}); the run may have been cut off while "
                         f"writing it") from exc
    if not isinstance(doc, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(doc).__name__}")
    version = doc.get("version", VERSION)
    if version != VERSION:
        raise ValueError(f"{path}: version {version!r} is not supported (this Feedline reads "
                         f"version {VERSION})")
    missing = [k for k in _REQUIRED if k not in doc]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}")
    ranks = {int(r): s for r, s in doc["ranks"].items()}
    merged = doc["merged"]
    if "training" not in merged:  # written before the training phase was kept
        merged = merge_ranks(ranks)
    return SavedProfile(
        ranks=ranks,
        merged=merged,
        data_ops=list(doc.get("data_ops") or []),
        throughput=list(doc.get("throughput") or []),
        context=dict(doc.get("context") or {}),
        events={int(r): e for r, e in (doc.get("events") or {}).items()},
        diagnosis=doc.get("diagnosis"),
        pool=dict(doc.get("pool") or {}),
    )


def summary_fields(merged: Mapping[str, Any], diagnosis: Diagnosis) -> dict[str, Any]:
    """The keys ``summary.json`` gains from the profile: the step view (``data_wait_fraction``
    and ``comm_exposed_fraction`` are shares of step time, ``step_breakdown`` seconds per step),
    the training phase (``time_breakdown``: share of the training wall per phase, adding up to
    1; ``explained_fraction``: the share in named phases) and the diagnosis."""
    training = merged["training"]
    return {
        "data_wait_fraction": merged["data_wait_fraction"],
        "comm_exposed_fraction": merged["comm_exposed_fraction"],
        "step_breakdown": dict(merged["step_breakdown"]),
        "training_wall_s": training["wall_s"],
        "time_breakdown": {p: v["share"] for p, v in training["phases"].items()},
        "explained_fraction": training["explained"],
        "diagnosis": diagnosis.as_dict(),
    }
