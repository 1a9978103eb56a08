"""The decode pool's controller on the driver (``data.autoscale``): trainers' wait in, pool out.

Every rank sends its data wait about once a second (``wait`` records) and every decoding process
its decode time (``decode`` records), both through the :class:`~pipeline.job.inbox.RunInbox` the
progress monitor drains. Every :data:`TICK_S` the controller judges the last :data:`WINDOW_S`
for growth (:func:`pipeline.pool.policy.decide`), and at the end of every epoch that epoch's
totals for shrinking (:func:`~pipeline.pool.policy.decide_epoch`); on a change it

- sets the pool's CPU limit on the inbox, which the running execution reads
  (:mod:`pipeline.pool.live_limits`): Ray Data runs as many decode tasks at once as it
  holds, and the next execution too (at an epoch's end the ranks wait for the verdict on it,
  :func:`~pipeline.train.loop.await_verdict`, before they stream the next one);
- asks Ray's autoscaler for preprocessing nodes when the pool outgrows the CPUs of the nodes
  ``data.placement`` selects, with bundles of that placement only (never a training node's),
  and withdraws the request once the trainers stop waiting (and at the end of the run);
- prints a line, appends a ``pool`` record to ``metrics.jsonl`` and sets the
  ``feedline_decode_pool_target`` gauge. Its samples make the ``decode pool`` track of
  ``timeline.json`` and the "Decode pool" section of ``report.md``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pipeline import jsonio
from pipeline.cluster.planner import pool_cpus
from pipeline.data.config import DataConfig
from pipeline.data.udf.reader import PULSE_S
from pipeline.messages import DecodeBusy, RankWait
from pipeline.pool.policy import (
    CLOSED,
    GROW_WAIT,
    SHRINK_WAIT,
    STARTUP_S,
    EpochTotals,
    Window,
    decide,
    decide_epoch,
)

logger = logging.getLogger(__name__)

TICK_S = 2.0  # how often the controller judges
WINDOW_S = 4.0  # the span of pulses it judges (only pulses of the pool as it is now)


class PoolController:
    """Runs on the driver; fed by :class:`~pipeline.job.progress.ProgressMonitor`."""

    def __init__(self, config: DataConfig, board: Any, *, run: str, metrics_path: Path,
                 console: Any, world_size: int = 1, train_cpus: float = 0.0,
                 act: bool = True, run_epochs: int = 0, rows_per_epoch: int = 0):
        self.config = config
        # act=False (data.autoscale off, or a fixed pool): only the samples, so the timeline
        # and summary show how Ray Data's own sizing fed the trainers
        self.act = act
        self.board = board  # the RunInbox: pool_cpus is read by the executing dataset
        self.low, self.high = config.concurrency
        self.size = self.low
        self.metrics_path = metrics_path
        self.console = console
        self.train_cpus = train_cpus  # CPUs the Train workers hold: never the pool's
        self.world_size = world_size
        # growth is priced against the rows the last decoding epoch has left (0: not known)
        self.run_epochs, self.rows_per_epoch = run_epochs, rows_per_epoch
        self.startup_s = STARTUP_S  # a new process's start: measured on every grow
        self._grown_at: float | None = None  # the last grow, until a new process reported
        self._processes: set[str] = set()  # the decoding processes that reported so far
        self._done: dict[int, set[int]] = {}  # epoch → ranks whose training pass ended
        self.limit = 0.0  # the CPU limit last set on the board
        self.capacity = float("inf")  # the CPUs the pool can have now (its nodes')
        self.samples: list[dict[str, Any]] = []  # every tick: t, target, actors, wait, busy
        self.decisions: list[dict[str, Any]] = []
        # every epoch's totals when its last rank's pass ended: its pool, wait and decode work
        self.epochs: list[dict[str, Any]] = []
        self.requested: int = 0  # CPU bundles asked of Ray's autoscaler now
        self._pulses: deque[RankWait | DecodeBusy] = deque()
        self._epoch_waits: dict[int, list[float]] = {}  # rank → [wait s, step s] this epoch
        self._epoch_work = 0.0  # decode actor-seconds this epoch
        self._epoch_rows = 0  # rows decoded this epoch
        # the run's decode time and the CPU time it used: waiting or computing
        self.decode_busy_s = self.decode_cpu_s = 0.0
        self._lock = threading.Lock()
        self._changed = self._ticked = time.time()
        self._full_at: float | None = None  # when every actor the limit holds first decoded
        self._start = self._epoch_start = self._changed
        self._warned_max = False
        self._gauge = _gauge(run) if act else None
        self._publish()

    # -- input ---------------------------------------------------------------------------------
    def observe(self, pulse: RankWait | DecodeBusy) -> None:
        """A rank's wait or an actor's decode time (any thread)."""
        ended = None
        with self._lock:
            self._pulses.append(pulse)
            if isinstance(pulse, RankWait):
                got = self._epoch_waits.setdefault(pulse.rank, [0.0, 0.0])
                got[0] += pulse.wait_s
                got[1] += pulse.step_s
                if pulse.epoch_done:
                    done = self._done.setdefault(pulse.epoch_done, set())
                    done.add(pulse.rank)
                    ended = pulse.epoch_done if len(done) == self.world_size else None
            else:
                self._epoch_work += pulse.busy_s
                self._epoch_rows += pulse.rows
                if pulse.actor not in self._processes:
                    self._processes.add(pulse.actor)
                    if self._grown_at is not None:  # a grow's first new process: its start
                        self.startup_s, self._grown_at = pulse.t - self._grown_at, None
                if pulse.cpu_s is not None:
                    self.decode_busy_s += pulse.busy_s
                    self.decode_cpu_s += pulse.cpu_s
        if ended:  # every rank's pass is over: judged before the next epoch's pool starts
            self._done.pop(ended, None)
            self.epoch_end(ended)

    def window(self, now: float) -> Window:
        """The last :data:`WINDOW_S`, or less for the wait and the busy share: only pulses since
        the whole pool first decoded (before, or in the first half of the cooldown, new
        processes were still starting). The rates do not depend on the pool: the whole span."""
        settled = self._full_at or self._changed + self.config.autoscale_cooldown_s / 2
        start = max(now - WINDOW_S, settled)
        with self._lock:
            while self._pulses and self._pulses[0].t < now - WINDOW_S:
                self._pulses.popleft()
            recent = list(self._pulses)
        waits: dict[int, list[float]] = {}
        busy: dict[str, float] = {}
        eaten: dict[int, list[float]] = {}  # rank → [samples, compute s] over the whole span
        decoded_rows = decoded_s = 0.0
        steps = 0
        for p in recent:
            if isinstance(p, RankWait):
                if p.samples:
                    got = eaten.setdefault(p.rank, [0.0, 0.0])
                    got[0] += p.samples
                    got[1] += p.step_s - p.wait_s
                if p.t < start:
                    continue
                got = waits.setdefault(p.rank, [0.0, 0.0])
                got[0] += p.wait_s
                got[1] += p.step_s
                steps += p.steps
            else:
                if p.rows:
                    decoded_rows += p.rows
                    decoded_s += p.busy_s
                if p.t >= start:
                    busy[p.actor] = busy.get(p.actor, 0.0) + p.busy_s
        wait = max((w / s for w, s in waits.values() if s > 0), default=0.0)
        # Decode tasks land on whichever of Ray's worker processes is idle: a pool of one task
        # at a time can report from three processes in a window. The pool is the tasks that run
        # at once, so it is at most what the limit holds (data.concurrency's max, left alone).
        actors = min(len(busy), self.size if self.act else self.high)
        # a pulse holds up to PULSE_S of decoding before it was sent: a window cut short by a
        # change is at least that long, or a pulse just after the cut reads as many tasks
        span, decoded = max(now - start, PULSE_S), sum(busy.values())
        share = decoded / (actors * span) if actors else 0.0
        # In step with the others, a rank's compute holds its wait for the slowest's batch: the
        # fastest rank's is nearest the step the trainers take when every rank is fed.
        per_sample = min((c / n for n, c in eaten.values() if c > 0), default=0.0)
        return Window(wait=wait, busy=min(1.0, share), actors=actors, steps=steps,
                      decoding=decoded / span,
                      rate=decoded_rows / decoded_s if decoded_s > 0 else 0.0,
                      demand=self.world_size / per_sample if per_sample > 0 else 0.0)

    def finish_s(self, window: Window) -> float | None:
        """Seconds the pool as it is needs for the rest of this epoch's rows, when no later
        epoch decodes (the cache replays them, or this is the last); None otherwise."""
        epoch = len(self.epochs) + 1
        decodes_again = epoch < self.run_epochs and (
            self.config.cache_mode == "off"
            or any(e["epoch"] > 1 and e["work_s"] > 0 for e in self.epochs))
        if decodes_again or not self.rows_per_epoch or window.rate <= 0:
            return None
        left = max(0, self.rows_per_epoch - self._epoch_rows)
        return left / (window.rate * max(1, min(self.size, window.actors)))

    # -- decisions -----------------------------------------------------------------------------
    def tick(self, now: float | None = None) -> None:
        """Judge the last window if :data:`TICK_S` passed (the monitor calls this every poll)."""
        now = now or time.time()
        if now - self._ticked < TICK_S:
            return
        self._ticked = now
        self._publish()  # nodes come and go
        window = self.window(now)
        self.samples.append({"t": now, "target": self.size if self.act else None,
                             "limit_cpus": self.limit if self.act else None,
                             "actors": window.actors, "decoding": round(window.decoding, 2),
                             "steps": window.steps, "wait": window.wait,
                             "busy": window.busy, "rate": round(window.rate, 1),
                             "demand": round(window.demand, 1)})
        if not self.act:
            return
        holds = max(1, min(self.size, int(self.limit / self.config.cpus_per_actor + 1e-9)))
        if self._full_at is None and window.actors >= holds:
            self._full_at = now
        decision = decide(window, size=self.size, low=self.low, high=self.high,
                          since_change_s=now - self._changed,
                          cooldown_s=self.config.autoscale_cooldown_s,
                          settled_s=now - self._full_at if self._full_at else 0.0,
                          finish_s=self.finish_s(window), startup_s=self.startup_s)
        if decision.size != self.size:
            self._change(decision, now, wait=window.wait, busy=window.busy,
                         actors=window.actors)
        elif "data.concurrency max" in decision.reason and not self._warned_max:
            self._warned_max = True
            self.console.print(f"[yellow]pool[/]: {decision.reason}; raise data.concurrency's "
                               f"max to let the pool grow")
        self._ask_autoscaler(window)

    def epoch_end(self, epoch: int) -> None:
        """Every rank finished ``epoch``'s training pass: record its totals and judge them for
        a smaller pool, while the ranks validate (the next epoch's pulses start a new total)."""
        now = time.time()
        with self._lock:
            waits, work = self._epoch_waits, self._epoch_work
            self._epoch_waits, self._epoch_work, self._epoch_rows = {}, 0.0, 0
        wait = max((w / s for w, s in waits.values() if s > 0), default=0.0)
        train_s = max((s for _, s in waits.values()), default=0.0)
        self.epochs.append({"epoch": epoch, "start": self._epoch_start, "end": now,
                            "size": self.size if self.act else None, "wait": wait,
                            "work_s": work, "train_s": train_s})
        self._epoch_start = now
        if not self.act:
            return
        decision = decide_epoch(EpochTotals(wait=wait, work_s=work, train_s=train_s),
                                size=self.size, low=self.low, since_change_s=now - self._changed,
                                cooldown_s=self.config.autoscale_cooldown_s)
        if decision.size != self.size:
            self._change(decision, now, wait=wait, busy=work / (train_s * self.size),
                         actors=self.size)
        self.board.set_judged.remote(epoch)  # after the limit: the board's calls run in order

    def _change(self, decision: Any, now: float, *, wait: float, busy: float,
                actors: int) -> None:
        record = {"type": "pool", "t": now, "elapsed_s": now - self._start,
                  "wait_before": wait, "busy_before": min(1.0, busy), "actors_before": actors,
                  "size_before": self.size, "size_after": decision.size,
                  "action": decision.action, "reason": decision.reason}
        self._grown_at = now if decision.size > self.size else None
        self.size, self._changed = decision.size, now
        self._publish()
        per_actor = self.config.cpus_per_actor
        holds = max(1, int(self.capacity / per_actor + 1e-9))
        if decision.size > holds:  # the CPUs, not the pool's max, hold it back: say so
            record["held_by_cpus"] = holds
            record["reason"] += (f"; but the {self.capacity:g} CPU(s) it can have hold only "
                                 f"{holds} actor(s) at data.cpus_per_actor {per_actor:g} "
                                 f"(the diagnosis says what can work)")
        self._record(record)

    def _record(self, record: dict[str, Any]) -> None:
        self.decisions.append(record)
        change = (f" {record['size_before']} → {record['size_after']} decode actors"
                  if record["size_before"] != record["size_after"] else "")
        self.console.print(f"pool: {record['action']}{change}: {record['reason']}")
        with open(self.metrics_path, "a") as fh:
            fh.write(jsonio.dumps(record) + "\n")

    def _publish(self) -> None:
        """The pool's CPU limit: its target, within the CPUs it can have now (those of the nodes
        ``data.placement`` selects, else the cluster's beside the trainers'; a preprocessing
        node that joined raises it)."""
        if not self.act:
            return
        import ray

        capacity = pool_cpus(self.config.placement)
        if capacity is None:
            capacity = ray.cluster_resources().get("CPU", 0.0) - self.train_cpus
        self.capacity = capacity
        limit = max(self.config.cpus_per_actor,
                    min(self.size * self.config.cpus_per_actor, capacity))
        if limit != self.limit:
            self.board.set_pool_cpus.remote(limit)
            self._full_at = None  # the pool grows (or will shrink) into the new limit
            self.limit = limit
        if self._gauge is not None:
            self._gauge.set(self.size)

    # -- Ray's autoscaler ----------------------------------------------------------------------
    def _ask_autoscaler(self, window: Window) -> None:
        """Bundles for the whole pool while it outgrows the data nodes and trainers wait;
        none once they stop waiting (in between, the request stands: nodes take minutes)."""
        placement = self.config.placement
        if not placement.labels and not placement.resources:
            return  # a CPU-only request could start a training node: ask only for data nodes
        if window.steps == 0:
            return  # validation, checkpoints, start-up: nothing says the trainers are fed
        need = self.size * self.config.cpus_per_actor
        have = pool_cpus(placement) or 0.0
        if window.wait > GROW_WAIT and need > have:
            want = self.size
        elif window.wait < SHRINK_WAIT:
            want = 0
        else:
            want = self.requested
        if want == self.requested:
            return
        request_preprocessing(self.config, want)
        self.requested = want
        now = time.time()
        self._record({"type": "pool", "t": now, "elapsed_s": now - self._start,
                      "wait_before": window.wait, "busy_before": window.busy,
                      "actors_before": window.actors, "size_before": self.size,
                      "size_after": self.size, "action": "request" if want else "withdraw",
                      "reason": (f"{need:g} CPUs wanted, {have:g} on the preprocessing nodes: "
                                 f"asked Ray's autoscaler for {want} bundle(s)" if want else
                                 "trainers no longer wait: autoscaler request withdrawn")})

    def close(self) -> None:
        """The run is over, however it ended: the processes reading the pool's limit stop, and
        a standing autoscaler request is withdrawn."""
        if self.act:
            self.board.set_pool_cpus.remote(CLOSED)
        if self.requested:
            try:
                request_preprocessing(self.config, 0)
                self.requested = 0
            except Exception as exc:  # the run's own error, if any, is the one to see
                logger.warning("autoscaler request not withdrawn: %s", exc)

    def cpu_share(self) -> float | None:
        """The decode actors' CPU time over their busy time: near 1 they compute (more CPUs
        help), far below they wait on I/O or sleeps (more actors per CPU help)."""
        return self.decode_cpu_s / self.decode_busy_s if self.decode_busy_s > 0 else None

    def summary(self) -> dict[str, Any]:
        return {"enabled": self.act, "range": [self.low, self.high], "final_size": self.size,
                "max_size": max([s["target"] or 0 for s in self.samples] + [self.size]),
                "decode_busy_s": self.decode_busy_s, "decode_cpu_s": self.decode_cpu_s,
                "decode_cpu_share": self.cpu_share(),
                "decisions": self.decisions, "epochs": self.epochs, "samples": self.samples}


def request_preprocessing(config: DataConfig, bundles: int) -> None:
    """Ask Ray's autoscaler for ``bundles`` decode actors' worth of preprocessing capacity (0
    withdraws): each bundle is ``data.cpus_per_actor`` CPUs plus the resources and labels of
    ``data.placement``, never a training node's."""
    from ray.autoscaler.sdk import request_resources

    placement = config.placement
    bundle = {"CPU": config.cpus_per_actor, **placement.resources}
    if bundles and placement.labels:
        request_resources(bundles=[bundle] * bundles,
                          bundle_label_selectors=[dict(placement.labels)] * bundles)
    else:
        request_resources(bundles=[bundle] * bundles)


def _gauge(run: str):
    try:
        from ray.util.metrics import Gauge

        gauge = Gauge("feedline_decode_pool_target", "decode actors the pool controller wants",
                      tag_keys=("run",))
        gauge.set_default_tags({"run": run})
        return gauge
    except Exception as exc:  # metrics off in this Ray: the console and metrics.jsonl remain
        logger.debug("no pool gauge: %s", exc)
        return None
