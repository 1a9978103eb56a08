"""Everything Train workers and decoding processes tell the driver, in one place.

Workers :func:`send` these to the run's inbox (:class:`pipeline.job.inbox.RunInbox`, an actor
on the driver's node); the driver drains it while ``fit()`` runs (:mod:`pipeline.job.progress`)
and hands the pool's pulses to its controller (:mod:`pipeline.pool.controller`)::

    Train worker ── Started, EpochProgress, RankWait, EpochDone, EpochClosed, ProfileTail,
                    LinkProbe, Diverged ───────────────────────────────────────────────►  inbox
    decode task ─── DecodeBusy ────────────────────────────────────────────────────────►

Frozen dataclasses: they pickle through Ray, and a reader sees every field a message carries.
No Ray import here: :func:`send` calls the handle it is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Started:
    """A Train worker entered its loop (again, after a restart: ``resumed`` says where)."""

    rank: int
    marks: dict[str, float]  # Unix times: process_start, entered
    nccl_plan: dict | None  # what the worker applied of the doctor's per-rank plan
    resumed: dict | None  # {epoch, step, consumed} of the checkpoint it resumed, or None


@dataclass(frozen=True)
class EpochProgress:
    """Rank 0's samples so far in ``epoch`` (from 0), about once a second: the progress bar."""

    epoch: int
    samples: int  # every rank's, estimated as rank 0's × world size


@dataclass(frozen=True)
class RankWait:
    """One rank's data wait and step time since its last pulse (first batches left out): what
    the decode pool's controller sizes the pool by. ``epoch_done`` (from 1) ends an epoch's
    training pass."""

    rank: int
    wait_s: float
    step_s: float
    steps: int
    t: float  # Unix time sent
    epoch_done: int | None = None
    samples: int = 0  # samples the steps trained (0: sent by a loop that did not count them)


@dataclass(frozen=True)
class DecodeBusy:
    """One decoding process's time spent decoding since its last pulse, and the CPU time it used
    meanwhile (far less than ``busy_s``: it waited on I/O or sleeps rather than computed)."""

    actor: str
    busy_s: float
    t: float
    cpu_s: float | None = None  # None: sent by a reader that did not measure it
    rows: int = 0  # rows it decoded meanwhile (0: sent by a reader that did not count them)


@dataclass(frozen=True)
class EpochDone:
    """One rank's end of an epoch: the epoch line (every rank's numbers where the loop reduced
    them) and what only this rank knows."""

    rank: int
    epoch: int  # from 1
    line: dict[str, Any]  # metrics.jsonl's epoch line: loss, throughput, straggler
    rank_samples: int
    rank_seconds: float
    transfer: dict[str, Any]  # this rank's cumulative TransferStats
    ids: Any  # np.ndarray: the ids this rank trained, in order
    resumed_ids: Any = None  # every rank's ids committed before a restart (rank 0 sends)
    profile: dict | None = None  # the profiler's window of this epoch
    data_ops: list | None = None  # Ray Data's operator stats (rank 0, streamed epochs)


@dataclass(frozen=True)
class EpochClosed:
    """Rank 0, once an epoch's checkpoint is saved and its validation has run: the validation
    metrics (every rank's counts summed) and when the epoch's work ended. The checkpoint comes
    before validation, so a stop during validation keeps the epoch just trained; its line then
    has no validation metrics."""

    epoch: int  # from 1
    metrics: dict[str, Any]  # the task's val_* metrics; empty without a validation split
    ended_at: float  # Unix time


@dataclass(frozen=True)
class ProfileTail:
    """After the last epoch: the training phase's tail and the timeline's events."""

    rank: int
    profile: dict
    events: list


@dataclass(frozen=True)
class LinkProbe:
    """The end-of-run all-reduce over the job's process group, judged (rank 0)."""

    busbw_GBps: float
    size_bytes: int
    multi_node: bool
    warning: str | None


@dataclass(frozen=True)
class Diverged:
    """A rank's loss went NaN or infinite past ``train.max_nonfinite_steps`` (sent before it
    raises, and waited for, so the driver can say why the worker failed)."""

    rank: int
    message: str


Message = (Started | EpochProgress | RankWait | DecodeBusy | EpochDone | EpochClosed | ProfileTail
           | LinkProbe | Diverged)
KINDS: dict[str, type] = {"start": Started, "progress": EpochProgress, "wait": RankWait,
                          "decode": DecodeBusy, "epoch": EpochDone, "closed": EpochClosed,
                          "profile_tail": ProfileTail, "probe": LinkProbe, "diverged": Diverged}


def send(inbox: Any, message: Message) -> Any:
    """Hand ``message`` to the run's inbox (fire and forget; ``ray.get`` the result to wait)."""
    return inbox.push.remote(message)


def parse(record: dict[str, Any]) -> Message:
    """A message from its recorded form (``{"type": KIND, **fields}``, as a JSON log keeps it)."""
    kind = record.get("type")
    if kind not in KINDS:
        raise ValueError(f"message type ({kind!r}) must be one of {', '.join(KINDS)}")
    return KINDS[kind](**{k: v for k, v in record.items() if k != "type"})

