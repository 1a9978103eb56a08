"""``summary.json`` as a type: how a run ended, what it did and how to resume it (driver; pure).

:class:`RunSummary` is what :meth:`pipeline.job.rundir.RunDir.write_summary` writes (its only
writer) and what ``RunResult.summary`` holds. Its fields are the file's keys. It reads as the
mapping the file is (``summary["status"]``, ``summary.get("resume")``, ``dict(summary)``) and
``summary | {"status": "failed", ...}`` gives a new one, so a key that is not a field is a
``TypeError`` where it is written, not a silent typo in the file.

A field that is None is left out of the file unless the run's status says it belongs there
(``resume``, ``checkpoint``, ``exactly_once``: null is their answer)::

    running ──► succeeded | failed | diverged | stopped
    (who holds   (what the run did: samples,   (where it stopped and the
     the folder)  accounting, diagnosis, ...)   command that resumes it)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

Status = Literal["running", "succeeded", "failed", "diverged", "stopped"]


@dataclass(frozen=True, eq=False)  # compared as the mapping it reads as (to a dict too)
class RunSummary(Mapping[str, Any]):
    status: Status
    name: str | None = None
    epochs: int | None = None
    # while it runs: which process holds the folder (a rerun tells a killed run from a live one)
    pid: int | None = None
    pid_start: int | None = None
    host: str | None = None
    started: str | None = None  # local time, ISO 8601
    resume: str | None = None  # the command that resumes the run (None: none can)
    # how it ended
    error: str | None = None  # failed, diverged, stopped at once: why
    signal: str | None = None  # stopped: SIGINT or SIGTERM
    epochs_done: int | None = None  # stopped: epochs its last checkpoint holds
    resumes_at: dict[str, int] | None = None  # stopped: {"epoch", "after_step"}
    ray_address: str | None = None
    # what a finished run did (pipeline.job.runner)
    samples: int | None = None
    samples_per_second: float | None = None  # over the wall the user waited
    steady_samples_per_second: float | None = None  # inside epochs, first batches left out
    wall_seconds: float | None = None
    breakdown: list[dict[str, Any]] | None = None  # where the wall went (job.breakdown)
    cache: dict[str, Any] | None = None
    num_workers: int | None = None
    task: str | None = None
    val_accuracy: float | None = None
    val_metrics: dict[str, Any] | None = None
    train_loss: float | None = None
    backend: str | None = None
    collective: dict[str, Any] | None = None
    transfer: dict[str, Any] | None = None
    straggler: dict[str, Any] | None = None
    plan: dict[str, Any] | None = None
    autoscale: dict[str, Any] | None = None
    data: dict[str, Any] | None = None
    bad_samples: int | None = None
    skipped_files: int | None = None
    skipped: list[dict[str, str]] | None = None
    restarts: int | None = None
    resumed_from: list[dict[str, Any]] | None = None
    accounting: list[dict[str, Any]] | None = None
    exactly_once: bool | None = None  # None: no ids to account
    checkpoint: str | None = None  # the last checkpoint, copied into the run folder
    # from the profile (pipeline.profile.schema.summary_fields)
    data_wait_fraction: float | None = None
    comm_exposed_fraction: float | None = None
    step_breakdown: dict[str, float] | None = None
    training_wall_s: float | None = None
    time_breakdown: dict[str, float] | None = None
    explained_fraction: float | None = None
    diagnosis: dict[str, Any] | None = None

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunSummary:
        """A summary read back (keys it does not know, from another version, are dropped); a
        ``TypeError`` without a status."""
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def __or__(self, changes: Mapping[str, Any]) -> RunSummary:
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, Any]:
        """The file's content: every field set, and the nulls the status calls for."""
        always = (_FINISHED if self.samples is not None and self.status != "stopped"
                  else _ALWAYS.get(self.status, frozenset()))
        return {f.name: value for f in dataclasses.fields(self)
                if (value := getattr(self, f.name)) is not None or f.name in always}

    def __getitem__(self, key: str) -> Any:
        return self.as_dict()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())


_RUNNING = frozenset({"status", "name", "epochs", "pid", "pid_start", "host", "started",
                      "resume"})
_FINISHED = frozenset({
    "status", "name", "epochs", "samples", "samples_per_second", "steady_samples_per_second",
    "wall_seconds", "cache", "num_workers", "task", "val_accuracy", "val_metrics", "train_loss",
    "ray_address", "backend", "collective", "transfer", "straggler", "plan", "autoscale",
    "data", "bad_samples", "restarts", "resumed_from", "accounting", "exactly_once",
    "checkpoint"})
#: the fields whose null is an answer, by status (a failed run that trained: a finished one's)
_ALWAYS: dict[str, frozenset[str]] = {
    "running": _RUNNING, "failed": _RUNNING, "diverged": _RUNNING, "succeeded": _FINISHED,
    "stopped": frozenset({"status", "signal", "name", "epochs", "epochs_done", "checkpoint",
                          "resumes_at", "resume", "ray_address"})}
