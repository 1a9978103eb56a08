"""Ray Data's per-operator stats as plain dicts: the preprocessing side of the diagnosis.

Runs on the driver or in a Train worker at the end of an epoch. Accepts what Ray 2.60 hands out:

- the string of ``Dataset.stats()`` / ``DataIterator.stats()`` (a streaming-split iterator in a
  Train worker fetches it from the split coordinator), parsed line by line;
- a ``DatasetStatsSummary`` (``Dataset.get_stats_summary()``), a ``DatasetStats``
  (``to_summary()``), or a ``Dataset`` itself, read field by field.

Each operator becomes ``{"operator", "rows", "busy_s", "blocked_s", "tasks", "wall_s"}``:

- ``busy_s``: total remote wall time of the operator's tasks ("Remote wall time ... total");
- ``blocked_s``: seconds the operator was held back by the streaming executor, task-submission
  plus task-output backpressure (``task_submission_backpressure_time`` +
  ``task_output_backpressure_time`` of its runtime metrics). A stats string carries them only
  when ``DataContext.verbose_stats_logs`` is on ("* Extra metrics: {...}"); otherwise None;
- ``rows``: output rows; ``tasks``: tasks executed; ``wall_s``: first to last block of the
  operator ("... blocks produced in 0.33s"), None when not printed.

Parents come before children (execution order); an operator printed twice ("[execution
cached]") is kept once. Fused operators ("A->B") are one operator, as Ray runs them. Objects are
read by attribute, so this module never imports Ray and loads on a torch-only machine.
"""

from __future__ import annotations

import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

_HEADER = re.compile(r"^\s*(?:Operator|Suboperator) \d+ (?P<name>.+?):(?P<rest>.*)$")
_TASKS = re.compile(r"(?P<tasks>\d+) tasks executed")
_PRODUCED = re.compile(r"blocks produced in (?P<wall>[\d.]+)s")
_WALL = re.compile(r"^\s*\* Remote wall time: .*?, (?P<total>[\d.]+)(?P<unit>us|ms|s) total")
_ROWS = re.compile(r"^\s*\* Output num rows(?: per block)?: .*?, (?P<total>\d+) total")
_EXTRA = re.compile(r"^\s*\* Extra metrics: ")
_BLOCKED_KEYS = ("task_submission_backpressure_time", "task_output_backpressure_time")
_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0}


def operator_stats(stats: Any) -> list[dict[str, Any]]:
    """Per-operator dicts from a stats string, summary, DatasetStats or Dataset."""
    if isinstance(stats, str):
        return parse_stats_text(stats)
    if hasattr(stats, "operators_stats"):
        return _from_summary(stats)
    if hasattr(stats, "to_summary"):
        return _from_summary(stats.to_summary())
    if hasattr(stats, "get_stats_summary"):
        return _from_summary(stats.get_stats_summary())
    if hasattr(stats, "stats"):
        return parse_stats_text(stats.stats())
    raise TypeError(f"operator_stats: expected a Ray Data stats string, DatasetStatsSummary, "
                    f"DatasetStats, Dataset or DataIterator, got {type(stats).__name__}")


def parse_stats_text(text: str) -> list[dict[str, Any]]:
    """Parse the text of ``Dataset.stats()`` / ``DataIterator.stats()``."""
    ops: dict[str, dict[str, Any]] = {}
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            name, rest = header.group("name"), header.group("rest")
            if "blocks produced" not in rest or name in ops:
                # A multi-operator header ("executed in"), a cached repeat, or an operator
                # that produced nothing: no numbers of its own to record.
                current = None
                continue
            current = ops[name] = _new(name)
            if m := _TASKS.search(rest):
                current["tasks"] = int(m.group("tasks"))
            if m := _PRODUCED.search(rest):
                current["wall_s"] = float(m.group("wall"))
            continue
        if current is None:
            continue
        if not line.strip():
            continue
        if not line.lstrip().startswith("*"):
            current = None  # another section ("Dataset iterator time breakdown:", ...)
            continue
        if m := _WALL.match(line):
            current["busy_s"] = float(m.group("total")) * _UNITS[m.group("unit")]
        elif m := _ROWS.match(line):
            current["rows"] = int(m.group("total"))
        elif _EXTRA.match(line):
            current["blocked_s"] = _blocked_from_text(line)
    return list(ops.values())


def _new(name: str) -> dict[str, Any]:
    return {"operator": name, "rows": 0, "busy_s": 0.0, "blocked_s": None, "tasks": 0,
            "wall_s": None}


def _blocked_from_text(line: str) -> float | None:
    # The dict is printed with repr(); some values (histograms) are not literals, so read the
    # two numbers by key instead of evaluating it.
    total, seen = 0.0, False
    for key in _BLOCKED_KEYS:
        m = re.search(rf"'{key}': ([-\d.eE+]+)", line)
        if m:
            total += float(m.group(1))
            seen = True
    return total if seen else None


def _from_summary(summary: Any) -> list[dict[str, Any]]:
    ops: dict[str, dict[str, Any]] = {}
    _walk(summary, ops)
    return list(ops.values())


def _walk(summary: Any, ops: dict[str, dict[str, Any]]) -> None:
    for parent in getattr(summary, "parents", None) or []:
        _walk(parent, ops)
    op_stats = list(getattr(summary, "operators_stats", None) or [])
    blocked = _blocked_from_metrics(getattr(summary, "extra_metrics", None) or {})
    for i, op in enumerate(op_stats):
        name = op.operator_name
        if name in ops:
            continue
        row = _new(name)
        if op.wall_time is not None and op.wall_time.count:
            row["busy_s"] = float(op.wall_time.sum)
        if op.output_num_rows is not None:
            row["rows"] = int(op.output_num_rows.sum)
        if op.task_rows is not None:
            row["tasks"] = int(op.task_rows.count)
        if op.earliest_start_time is not None:
            row["wall_s"] = float(op.time_total_s)
        # Runtime metrics belong to the whole (possibly multi-operator) stage; Ray prints them
        # after its last sub-operator, and so do we.
        if i == len(op_stats) - 1:
            row["blocked_s"] = blocked
        ops[name] = row


def _blocked_from_metrics(metrics: dict[str, Any]) -> float | None:
    values = [metrics.get(k) for k in _BLOCKED_KEYS]
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    return sum(numbers) if numbers else None
