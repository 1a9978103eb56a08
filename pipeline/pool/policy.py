"""Sizing the decode pool from the trainers' data wait (``data.autoscale``): the policy.

Left alone, Ray Data runs as many decode tasks as it has input for: with the whole manifest
enqueued at once, ``data.concurrency``'s max, decoding the epoch as fast as it can into the
object store, whether the trainers need the samples yet or not. This policy sizes it by what
the trainers wait instead, as Cachew and Meta's DPP do. The driver's controller
(:mod:`pipeline.pool.controller`) feeds it the slowest rank's data-wait fraction and the decode
actors' busy time:

- **grow**, judged every few seconds on a short window, while the slowest rank waits more than
  ``GROW_WAIT`` of its step time and the actors are busy. As soon as the window has both rates (a
  decode task's rows per second of decoding, from the first blocks; the rows per second the trainers
  eat when fed, from their steps' compute alone, from the first steps) the pool is sized from them
  at once: ``demand / (rate x busy x TARGET_BUSY)`` tasks (a task at once decodes only its busy
  share of the time: Ray Data schedules and hands off in between). The rates do not depend on how
  many tasks run, so they may be judged while new tasks start. Before that, the wait alone sizes it:
  decoding is the bottleneck, the trainers get ``(1 - wait)`` of what they could eat, so the pool
  needs ``1 / (1 - wait)`` times the tasks it has (at most 4x per decision); so too once the pool
  has settled and the trainers still wait where the rates say it keeps up (rates that missed
  something: tasks sharing CPUs, ranks waiting for each other). Ray Data grows a running pool within
  seconds (an "actor" here is one decode task at a time: the processes decoding). Growth is priced:
  when the tasks running would finish the last epoch that decodes sooner than a new process starts,
  the pool is kept.
- **shrink**, judged when an epoch ends, on its totals: when no rank waited more than
  ``SHRINK_WAIT``, the epoch's decode work (actor-seconds) spread over its training time needs
  ``work / (train time x TARGET_BUSY)`` actors. A whole epoch, because a pool that decodes
  faster than the trainers eat finishes early and stops (its idle time is after its work, not
  inside it); and at its end, because Ray Data 2.60 removes only idle actors, so a smaller pool
  starts with the next execution anyway.
- **hold** otherwise, for ``cooldown_s`` after every change, and, without rates, until every
  actor the pool may hold has decoded for a whole window (``SETTLE_S``; at most
  ``SETTLE_TIMEOUT_S`` after the change, for a pool Ray Data does not fill): a window in which
  new actors were still starting shows a shortage they are about to remove, and growing on it
  by the wait overshoots (measured: 4 → 6 actors where 4 fed the trainers,
  ``benchmarks/results/elastic-2026-12-05.md``). The band between the two wait thresholds is
  the hysteresis: a pool that just fed the trainers is kept.

Pure functions of plain numbers: the unit tests drive them with the numbers a real run sent.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

GROW_WAIT = 0.10  # the slowest rank waits more than this share of its step time: grow
SHRINK_WAIT = 0.02  # every rank waits less than this: the pool may shrink
BUSY_TO_GROW = 0.6  # actors busier than this share of the time: decoding is the bottleneck
TARGET_BUSY = 0.75  # a shrunk pool's actors are busy about this much (headroom for bursts)
MAX_GROWTH = 4.0  # one decision at most quadruples the pool
SETTLE_S = 4.0  # every actor decoding this long before a window is judged for growth
SETTLE_TIMEOUT_S = 30.0  # ... unless the change is this old (Ray Data did not fill the pool)
STARTUP_S = 2.0  # a new decoding process's start-up until its first rows, before one is measured
CLOSED = -1.0  # the CPU limit a finished run leaves for the processes reading it


@dataclass(frozen=True)
class Window:
    """What the controller saw over one window of a run (all ranks, all decode actors)."""

    wait: float  # the slowest rank's data-wait share of its step time, first batches excluded
    busy: float  # the decode actors' busy share of the window (decode time / actors x window)
    actors: int  # decode actors (tasks at once) that reported in the window, at most the pool
    steps: int  # training steps the ranks reported in it (0: nothing to judge)
    decoding: float = 0.0  # decode seconds per second of the window: tasks at once, on average
    rate: float = 0.0  # rows one task decodes per second of decoding (0: not measured yet)
    demand: float = 0.0  # rows per second the trainers eat when fed (0: not measured yet)

    def need(self) -> int | None:
        """The tasks at once that feed the trainers at ``TARGET_BUSY``, from the rates (None:
        not both measured). A task at once delivers its decode rate only while it decodes: its
        busy share of the window (Ray Data's scheduling and hand-off between tasks are the
        rest; the pool grows only when it is at least ``BUSY_TO_GROW``)."""
        if self.rate <= 0 or self.demand <= 0:
            return None
        slot = self.rate * min(1.0, max(self.busy, BUSY_TO_GROW))
        return math.ceil(self.demand / (slot * TARGET_BUSY) - 1e-9)


@dataclass(frozen=True)
class Decision:
    size: int  # the pool size to run with
    action: str  # "grow", "shrink" or "hold"
    reason: str


def decide(window: Window, *, size: int, low: int, high: int, since_change_s: float,
           cooldown_s: float, settled_s: float, finish_s: float | None = None,
           startup_s: float = STARTUP_S) -> Decision:
    """The pool size for the next window, from ``size`` (the current target) and the window;
    ``settled_s``: how long every actor the pool may hold has been decoding (0: not yet);
    ``finish_s``: seconds the pool as it is needs for the rest of the last epoch that decodes
    (None: more decoding ahead, or not known), against ``startup_s`` for a new process."""
    if window.steps == 0:
        return Decision(size, "hold", "no training steps in the window")
    if window.actors == 0:  # trainers eat buffered or cached samples: nothing decodes to judge
        return Decision(size, "hold", "no decode in the window")
    if since_change_s < cooldown_s:
        return Decision(size, "hold", f"{since_change_s:.0f} s since the last change "
                                      f"(cooldown {cooldown_s:g} s)")
    need = window.need()
    starting = settled_s < SETTLE_S and since_change_s < SETTLE_TIMEOUT_S
    if need is None and starting:
        return Decision(size, "hold", f"{window.actors} actor(s) decoding, not yet the whole "
                                      f"pool for {SETTLE_S:g} s: the last change is starting")
    wait, busy = window.wait, window.busy
    if wait <= GROW_WAIT:
        return Decision(size, "hold", f"trainers wait {wait:.1%}, actors busy {busy:.0%}")
    if busy < BUSY_TO_GROW:
        return Decision(size, "hold", f"trainers wait {wait:.0%} but the decode actors are "
                                      f"busy only {busy:.0%}: not a pool shortage")
    if size >= high:
        return Decision(size, "hold", f"trainers wait {wait:.0%} at data.concurrency max "
                                      f"({high})")
    if finish_s is not None and finish_s < startup_s:
        return Decision(size, "hold", f"trainers wait {wait:.0%}, but the {size} task(s) "
                                      f"decoding finish the last decoding epoch in "
                                      f"{finish_s:.1f} s, before a new one starts "
                                      f"(~{startup_s:.1f} s)")
    rates = (f"the trainers eat {window.demand:.0f} rows/s when fed, a decode task delivers "
             f"{window.rate:.0f} rows/s")
    if need is not None and need > size:
        return Decision(min(high, need), "grow", f"trainers wait {wait:.0%}: {rates}, so "
                                                 f"{need} at ~{TARGET_BUSY:.0%} busy")
    if need is not None and starting:
        return Decision(size, "hold", f"trainers wait {wait:.0%}, but {rates}: {size} "
                                      f"task(s) keep up once they all run")
    # No rates, or rates that say the pool keeps up while the whole settled pool leaves the
    # trainers waiting (the tasks share CPUs, the ranks wait for each other): the tasks that
    # ran are what delivered (1 - wait), size the pool from them
    base = max(1, min(size, window.actors or size))
    need = math.ceil(base / max(1.0 - wait, 1.0 / MAX_GROWTH) - 1e-9)
    return Decision(min(high, max(size + 1, need)), "grow",
                    f"trainers wait {wait:.0%}, actors busy {busy:.0%}: {base} actor(s) "
                    f"deliver {1 - wait:.0%} of the demand")


@dataclass(frozen=True)
class EpochTotals:
    """One epoch's totals, over its training steps (first batches excluded)."""

    wait: float  # the slowest rank's data-wait share of its step time
    work_s: float  # decode actor-seconds of the training set
    train_s: float  # the slowest rank's training time (the sum of its step times)


def decide_epoch(epoch: EpochTotals, *, size: int, low: int, since_change_s: float,
                 cooldown_s: float) -> Decision:
    """At the end of an epoch: the pool the next one needs, or ``size``."""
    if epoch.train_s <= 0 or epoch.work_s <= 0:
        return Decision(size, "hold", "nothing decoded this epoch (cache replay)")
    if since_change_s < cooldown_s:
        return Decision(size, "hold", f"{since_change_s:.0f} s since the last change "
                                      f"(cooldown {cooldown_s:g} s)")
    need = max(low, math.ceil(epoch.work_s / (epoch.train_s * TARGET_BUSY) - 1e-9))
    if epoch.wait < SHRINK_WAIT and need < size:
        return Decision(need, "shrink", f"trainers waited {epoch.wait:.1%} this epoch; its "
                                        f"{epoch.work_s:.0f} actor-seconds of decoding over "
                                        f"{epoch.train_s:.0f} s of training need {need} "
                                        f"actor(s) at ~{TARGET_BUSY:.0%}")
    return Decision(size, "hold", f"trainers waited {epoch.wait:.1%} this epoch; {need} "
                                  f"actor(s) at ~{TARGET_BUSY:.0%} would do its decoding")
