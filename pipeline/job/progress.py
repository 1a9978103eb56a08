"""Driver-side view of a running job: a progress bar, per-epoch lines and ``metrics.jsonl``.

A background thread drains the :class:`~pipeline.job.inbox.RunInbox` while
``trainer.fit()`` blocks the main thread. Once every rank has reported an epoch's training
pass, its ids are kept in the run directory (:mod:`pipeline.job.delivered`), so a stopped run's
rerun accounts for it; its line (global numbers, not rank 0's guess) is printed and appended to
``metrics.jsonl`` with the validation metrics, once validation has run
(:class:`~pipeline.messages.EpochClosed`), or without them when the run ends first.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline import jsonio
from pipeline.job.delivered import save_epoch
from pipeline.messages import (
    DecodeBusy,
    Diverged,
    EpochClosed,
    EpochDone,
    EpochProgress,
    LinkProbe,
    ProfileTail,
    RankWait,
    Started,
)

logger = logging.getLogger(__name__)

POLL_S = 0.5


class ProgressMonitor:
    """Runs on the driver; ``with ProgressMonitor(...) as mon: trainer.fit()``."""

    def __init__(self, reporter: Any, *, epochs: int, samples_per_epoch: int, world_size: int,
                 metrics_path: Path, console: Console, show: bool = True,
                 delivered_dir: Path | None = None, pool: Any = None):
        self.reporter = reporter
        self.epochs = epochs
        self.world_size = world_size
        self.metrics_path = metrics_path
        self.delivered_dir = delivered_dir  # each finished epoch's ids, as it ends
        self.console = console
        self._pool_failed = False
        self.pool = pool  # a PoolController (data.autoscale): gets the wait and decode pulses
        self.epoch_records: dict[int, dict[int, EpochDone]] = defaultdict(dict)
        self.epoch_metrics: list[dict] = []
        self.transfer: dict[int, dict] = {}
        # rank → epoch → span summary (an epoch repeated after a restart replaces the first try)
        self.profiles: dict[int, dict[int, dict]] = defaultdict(dict)
        self.events: dict[int, list[dict]] = {}
        # rank → the training phase's tail after its last epoch summary (StepProfiler windows)
        self.profile_tails: dict[int, dict] = {}
        self.data_ops: list[dict] = []
        # epoch → rank → sample ids in training order; a rank that repeats an epoch after a
        # restart replaces it, and that epoch's ids committed before the restart are kept apart
        self.delivered: dict[int, dict[int, object]] = defaultdict(dict)
        self.resumed_ids: dict[int, object] = {}
        self.probe: dict | None = None  # the end-of-run link probe, from rank 0
        self.attempts: list[dict | None] = []  # rank 0's starts: None, then where it resumed
        self.worker_marks: dict[str, float] = {}  # rank 0's first start (Unix times)
        self.nccl_received: dict[int, dict | None] = {}  # rank → its NCCL plan (None: no GPU)
        self.diverged: str | None = None  # a rank's NonFiniteLossError, said before it raised
        self.write_error: OSError | None = None  # the first write to the run folder that failed
        self._reported: set[int] = set()
        self._lines: dict[int, dict] = {}  # epoch → its line, until validation closes it
        self._closed: dict[int, EpochClosed] = {}
        self._stop = threading.Event()
        self._drain_lock = threading.Lock()  # the poll thread's and a caller's drains in turn
        self._thread = threading.Thread(target=self._run, name="feedline-progress", daemon=True)
        self._progress = Progress(
            TextColumn("[bold]epoch {task.fields[epoch]}/{task.fields[epochs]}"), BarColumn(),
            TextColumn("{task.completed:,.0f}/{task.total:,.0f} samples"),
            TextColumn("{task.fields[rate]}"), TimeElapsedColumn(),
            console=console, disable=not show, transient=True)
        self._task = self._progress.add_task("train", total=samples_per_epoch * epochs, epoch=1,
                                             epochs=epochs, rate="")
        self._samples_per_epoch = samples_per_epoch

    def __enter__(self) -> ProgressMonitor:
        self.metrics_path.parent.mkdir(parents=True, exist_ok=True)
        self._progress.start()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.drain()  # whatever arrived between the last poll and the end of fit()
        self.close_lines()
        self._progress.stop()

    def close_lines(self) -> None:
        """Write the lines of epochs whose validation never came (the run stopped or failed
        during it): the epoch trained and is checkpointed, so its line is kept."""
        for epoch in sorted(self._lines):
            try:
                self._write_line(epoch)
            except OSError as exc:
                self._write_failed(exc)

    def _run(self) -> None:
        while not self._stop.wait(POLL_S):
            self.drain()
            if self.pool is not None:
                try:
                    self.pool.tick()
                except OSError as exc:  # metrics.jsonl on a full disk
                    self._write_failed(exc)
                except Exception as exc:  # a failed decision must not stop the progress display
                    logger.exception("pool controller")
                    if not self._pool_failed:  # said once: it fails the same way every tick
                        self._pool_failed = True
                        self.console.print(f"[red]error[/]: the decode pool's controller failed "
                                           f"({exc!r}); the pool keeps its size")

    @property
    def last_epoch(self) -> int:
        """The last epoch every rank reported (0: none yet)."""
        return max(self._reported, default=0)

    def drain(self) -> None:
        """Take what the workers sent since the last call (the driver's thread polls; a caller
        that must know now, after a failed fit, may call it too)."""
        import ray

        with self._drain_lock:
            try:
                records = ray.get(self.reporter.drain.remote(), timeout=30)
            except (ray.exceptions.RayError, TimeoutError) as exc:
                logger.warning("progress reporter unavailable: %s", exc)
                return
            for message in records:
                try:
                    self._take(message)
                except OSError as exc:  # a full disk: said once, the run fails when fit() ends
                    self._write_failed(exc)

    def _write_failed(self, exc: OSError) -> None:
        if self.write_error is None:
            self.write_error = exc
            self.console.print(f"[red]error[/]: cannot write the run folder ({exc}); the run "
                               f"fails at its end", highlight=False)

    def _take(self, message: Any) -> None:
        if isinstance(message, (RankWait, DecodeBusy)):
            if self.pool is not None:
                self.pool.observe(message)
        elif isinstance(message, EpochProgress):
            done = message.epoch * self._samples_per_epoch + message.samples
            self._progress.update(self._task, completed=done, epoch=message.epoch + 1)
        elif isinstance(message, EpochDone):
            self._on_epoch(message)
        elif isinstance(message, EpochClosed):
            self._on_closed(message)
        elif isinstance(message, LinkProbe):
            self.probe = asdict(message)
        elif isinstance(message, ProfileTail):  # after the last epoch; the timeline
            self.profile_tails[message.rank] = message.profile
            if message.events:
                self.events[message.rank] = message.events
        elif isinstance(message, Diverged):
            self.diverged = self.diverged or message.message
        elif isinstance(message, Started):
            self._on_start(message)

    def _on_start(self, message: Started) -> None:
        self.nccl_received[message.rank] = message.nccl_plan
        if message.rank != 0:
            return
        self.attempts.append(message.resumed)
        self.worker_marks = self.worker_marks or message.marks
        if message.resumed:
            self.console.print(f"restarted: resuming epoch {message.resumed['epoch'] + 1} after "
                               f"step {message.resumed['step']}")

    def _on_epoch(self, message: EpochDone) -> None:
        epoch, rank = message.epoch, message.rank
        self.epoch_records[epoch][rank] = message
        if message.profile:
            self.profiles[rank][epoch] = message.profile
        if message.data_ops:
            self.data_ops = message.data_ops
        self.delivered[epoch][rank] = message.ids
        if message.resumed_ids is not None:
            self.resumed_ids[epoch] = message.resumed_ids
        if len(self.epoch_records[epoch]) < self.world_size:
            return  # not every rank yet
        if self.delivered_dir is not None:  # again for an epoch repeated after a restart
            save_epoch(self.delivered_dir, epoch, self.delivered[epoch],
                       self.resumed_ids.get(epoch))
        if epoch in self._reported:
            return  # an epoch repeated after a restart: one line each
        self._reported.add(epoch)
        ranks = self.epoch_records[epoch]
        self.transfer = {r: v.transfer for r, v in ranks.items()}  # cumulative per rank
        merged = dict(ranks[0].line)
        merged["per_rank"] = {str(r): {"samples": v.rank_samples, "seconds": v.rank_seconds}
                              for r, v in sorted(ranks.items())}
        for earlier in sorted(e for e in self._lines if e < epoch):
            self._write_line(earlier)  # its validation never came (a restart during it)
        self._lines[epoch] = merged
        if epoch in self._closed:  # rank 0's validation message came before a peer's report
            self._write_line(epoch)

    def _on_closed(self, message: EpochClosed) -> None:
        self._closed[message.epoch] = message
        if message.epoch in self._lines:
            self._write_line(message.epoch)

    def _write_line(self, epoch: int) -> None:
        """The epoch's line, with its validation metrics when they came: ``metrics.jsonl``,
        the console and the progress bar."""
        merged = self._lines.pop(epoch)
        closed = self._closed.pop(epoch, None)
        if closed is not None:
            merged |= closed.metrics | {"ended_at": closed.ended_at}
        self.epoch_metrics.append(merged)
        with open(self.metrics_path, "a") as fh:
            fh.write(jsonio.dumps(merged) + "\n")
        self._progress.update(self._task, completed=epoch * self._samples_per_epoch,
                              epoch=min(epoch + 1, self.epochs),
                              rate=f"{merged['samples_per_second']:,.0f} samples/s")
        # the task's validation metrics (val_accuracy for classification), counts left out
        val = "".join(f"  {k} {v:.3f}" for k, v in merged.items()
                      if k.startswith("val_") and isinstance(v, float))
        self._progress.console.print(
            f"epoch {epoch}/{self.epochs}  loss {merged['train_loss']:.4f}  "
            f"{merged['samples_per_second']:,.0f} samples/s  {merged['epoch_seconds']:.1f}s{val}")
