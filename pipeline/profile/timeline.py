"""``timeline.json``: every rank's recent steps in Chrome trace-event format (Perfetto, chrome://tracing).

Layout: one process per rank (``pid`` = rank, named "rank N"), one thread (track) per phase
(``tid`` 1.. in :data:`~pipeline.profile._summary.TRACKS` order: the step phases, then the
out-of-step phases startup, validation, report and checkpoint; ``tid`` 0 holds whole steps),
plus one process "preprocessing (Ray Data)" with a track per operator and, with
``data.autoscale``, counter tracks of the decode pool (target, actors decoding, slowest rank's
wait) with an instant event per decision. Ray Data reports totals,
not timestamps comparable across processes, so each operator is one event spanning the traced
window with its rows, busy and blocked seconds in ``args``. Timestamps are rebased so the trace
starts at 0; the Unix time of 0 is kept in ``otherData``. Ranks on different hosts line up to
within their clocks' sync.

Runs on the driver; pure apart from writing the file.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.profile._summary import TRACKS


def build_trace(rank_events: Mapping[int, Sequence[Mapping[str, Any]]],
                data_ops: Sequence[Mapping[str, Any]],
                pool: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The trace as a dict: ``{"traceEvents": [...], "displayTimeUnit": "ms", "otherData"}``."""
    ranks = sorted(int(r) for r in rank_events)
    spans = [e for r in ranks for e in _events_of(rank_events, r)]
    t0 = min((e["ts"] for e in spans), default=0.0)
    t1 = max((e["ts"] + e.get("dur", 0.0) for e in spans), default=t0)
    out: list[dict[str, Any]] = []
    for rank in ranks:
        out.append(_meta("process_name", rank, 0, {"name": f"rank {rank}"}))
        out.append(_meta("process_sort_index", rank, 0, {"sort_index": rank}))
        for tid, name in enumerate(TRACKS):
            out.append(_meta("thread_name", rank, tid, {"name": name}))
            out.append(_meta("thread_sort_index", rank, tid, {"sort_index": tid}))
    for event in spans:
        out.append({**event, "ts": event["ts"] - t0})
    if data_ops:
        pid = (max(ranks) + 1) if ranks else 0
        out.append(_meta("process_name", pid, 0, {"name": "preprocessing (Ray Data)"}))
        out.append(_meta("process_sort_index", pid, 0, {"sort_index": pid}))
        for tid, op in enumerate(data_ops):
            name = str(op.get("operator", f"operator {tid}"))
            out.append(_meta("thread_name", pid, tid, {"name": name}))
            args = {k: op.get(k) for k in ("rows", "busy_s", "blocked_s", "tasks", "wall_s")}
            out.append({"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": 0.0,
                        "dur": max(t1 - t0, 1.0), "cat": "preprocessing", "args": args})
    if pool and pool.get("samples"):
        out += _pool_track(pool, pid=(max(ranks) + 2) if ranks else 1, t0=t0)
    return {"traceEvents": out, "displayTimeUnit": "ms",
            "otherData": {"unix_time_of_ts0_s": t0 / 1e6, "ranks": ranks}}


def write_timeline(path: str | Path, rank_events: Mapping[int, Sequence[Mapping[str, Any]]],
                   data_ops: Sequence[Mapping[str, Any]],
                   pool: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`build_trace` to ``path`` (e.g. ``RUN_DIR/timeline.json``); returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(build_trace(rank_events, data_ops, pool)))
    tmp.replace(path)  # readers never see half a file
    return path


def _events_of(rank_events: Mapping[Any, Sequence[Mapping[str, Any]]],
               rank: int) -> list[dict[str, Any]]:
    events = rank_events.get(rank, rank_events.get(str(rank), ()))
    # The pid is forced to the rank the events were filed under, whatever the worker wrote.
    return [{**e, "pid": rank} for e in events if "ts" in e]


def _pool_track(pool: Mapping[str, Any], *, pid: int, t0: float) -> list[dict[str, Any]]:
    """The controller's samples as counters and its decisions as instants (Unix s → trace µs).
    Before the first step the trace has no time 0 of its own: the first sample's is used."""
    base = t0 if t0 else pool["samples"][0]["t"] * 1e6
    name = "decode pool (data.autoscale)" if pool.get("enabled") else "decode pool"
    out = [_meta("process_name", pid, 0, {"name": name})]
    for s in pool["samples"]:
        ts = s["t"] * 1e6 - base
        target = {} if s["target"] is None else {"target": s["target"]}  # None: not sized
        out.append({"name": "decode actors", "ph": "C", "pid": pid, "ts": ts,
                    "args": {**target, "decoding": s["actors"]}})
        out.append({"name": "slowest rank's data wait", "ph": "C", "pid": pid, "ts": ts,
                    "args": {"wait": round(s["wait"], 4)}})
    for d in pool.get("decisions", []):
        out.append({"name": f"{d['action']} {d['size_before']}→{d['size_after']}", "ph": "i",
                    "s": "p", "pid": pid, "tid": 0, "ts": d["t"] * 1e6 - base,
                    "args": {"reason": d["reason"]}})
    return out


def _meta(kind: str, pid: int, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "ts": 0, "args": args}
