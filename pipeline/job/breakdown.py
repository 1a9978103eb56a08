"""Where a job's wall time went, from process start to exit (driver; pure but for the clock).

The user waits for the whole process, not for the steady state of an epoch: imports, Ray's
start, planning, the worker group, every epoch's start-up and the teardown all count. The driver
marks its milestones with :class:`JobClock`; the Train workers report each epoch's Unix start
and end and its first-batch wait; :func:`breakdown` turns both into consecutive phases that add
up to the wall time::

    process start ─ imports ─ ray start ─ driver set-up ─ worker group ─┐
      ┌─────────────────────────────────────────────────────────────────┘
      └ [epoch start-up (first batch) ─ steady training ─ report, checkpoint, validation
         ─ between epochs]* ─ fit teardown
        ─ outputs ─ ray shutdown ─ (exit)
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.procfs import process_start


class JobClock:
    """Unix-time milestones of one run on the driver; ``mark(name)`` once per milestone.

    ``started``: the process start for a CLI or ``ray job submit`` run (what the user waits
    for), the call's start for ``pipeline.run`` inside a longer-lived driver. The job fills
    ``epochs`` (rank 0's per-epoch timing records) and ``worker`` (rank 0's start marks).
    """

    def __init__(self, started: float | None = None) -> None:
        self.marks: dict[str, float] = {"process_start": started or process_start()}
        self.epochs: list[dict[str, Any]] = []
        self.worker: dict[str, float] = {}

    def mark(self, name: str) -> None:
        self.marks[name] = time.time()

    def breakdown(self) -> list[dict[str, Any]]:
        return breakdown(self.marks, self.epochs, self.worker)


def breakdown(marks: dict[str, float], epochs: list[dict[str, Any]],
              worker: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """Consecutive phases ``{"phase", "seconds", "share"}`` from process start to the last mark.

    ``epochs``: per epoch ``{"epoch", "started_at", "ended_at", "first_batch_seconds",
    "epoch_seconds"}`` (rank 0's Unix times; ``ended_at``: its validation's end, or its report's
    when the run stopped during validation); ``worker``: rank 0's ``process_start`` (its
    process began; earlier than ``fit_started`` when Ray reused a prestarted worker) and
    ``entered`` (the train loop was called). Missing marks (a failed run) end the list early.
    """
    rows: list[tuple[str, float]] = []
    t = marks["process_start"]

    def until(name: str, when: float | None) -> None:
        nonlocal t
        if when is not None:
            rows.append((name, max(0.0, when - t)))
            t = max(t, when)

    until("imports and config", marks.get("entered"))
    until("ray start", marks.get("ray_started"))
    until("driver set-up (plan, network, datasets)", marks.get("fit_started"))
    if epochs:
        worker = worker or {}
        until("worker group start (Train controller, worker processes)",
              worker.get("process_start"))
        until("worker process start-up (imports, Train's process group)", worker.get("entered"))
        until("worker set-up (model, DDP, dataset shards)", epochs[0]["started_at"])
    for i, e in enumerate(epochs):
        if i:
            before = epochs[i - 1]["epoch"]
            until(f"epoch {before} to {e['epoch']} (between epochs)", e["started_at"])
        start_up = min(e["first_batch_seconds"], e["epoch_seconds"])
        rows.append((f"epoch {e['epoch']} start-up (first batch)", start_up))
        rows.append((f"epoch {e['epoch']} steady training", e["epoch_seconds"] - start_up))
        t = e["started_at"] + e["epoch_seconds"]
        until(f"epoch {e['epoch']} report, checkpoint and validation", e["ended_at"])
    until("fit teardown (last checkpoint, link probe, worker group)", marks.get("fit_done"))
    until("outputs (summary, profile, plots)", marks.get("outputs_done"))
    until("ray shutdown", marks.get("ray_stopped"))
    wall = t - marks["process_start"]
    return [{"phase": name, "seconds": round(s, 3), "share": round(s / wall, 4) if wall else 0.0}
            for name, s in rows]


def append_to_report(report: Path, rows: list[dict[str, Any]]) -> None:
    """Add the breakdown as ``report.md``'s last section (after the profile's)."""
    with open(report, "a") as fh:
        fh.write("\n" + to_markdown(rows))


def to_markdown(rows: list[dict[str, Any]]) -> str:
    """The breakdown as a markdown table with its total."""
    total = sum(r["seconds"] for r in rows)
    lines = ["## Where the job's wall time went (process start to exit)", "",
             "| phase | seconds | share |", "|---|---:|---:|"]
    lines += [f"| {r['phase']} | {r['seconds']:.2f} | {r['share']:.1%} |" for r in rows]
    lines += [f"| **total** | **{total:.2f}** | |", ""]
    return "\n".join(lines)
