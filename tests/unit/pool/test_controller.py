"""The pool controller's view of a run (pipeline.pool.controller): windows and epoch totals from the
pulses a real run sent (elastic_pulses.jsonl: the first 18 s of examples/quickstart.yaml with
25 ms injected per decoded sample, one decode actor, then four; short_epoch_pulses.jsonl: the
first 26 s of benchmarks/elastic.py's controller arm with data.cache memory, whose one decoding
epoch lasts about 20 s). Mostly passive (act=False), as with data.autoscale off: it samples and
never touches Ray."""

import json
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from pipeline.config import load_config
from pipeline.messages import DecodeBusy, RankWait, parse
from pipeline.pool.controller import PoolController


def recorded(name):
    return [parse(json.loads(x)) for x in (Path(__file__).parent / name).read_text().splitlines()]


RECORDED = recorded("elastic_pulses.jsonl")  # sent before pulses counted rows and samples
SHORT = recorded("short_epoch_pulses.jsonl")


class Quiet:
    def print(self, *args, **kwargs):
        pass


@pytest.fixture
def pool(tmp_path):
    config = load_config({"data": {"concurrency": [1, 8], "autoscale_cooldown_s": 1}}).data
    return PoolController(config, board=None, run="t", metrics_path=tmp_path / "m.jsonl",
                          console=Quiet(), world_size=2, act=False)


@pytest.fixture
def T0():
    """The recorded run replayed from now on: its first pulse 1 s from now."""
    return time.time() + 1.0


def feed(pool, t0, until_s):
    for p in RECORDED:
        if p.t - RECORDED[0].t <= until_s:
            pool.observe(replace(p, t=p.t - RECORDED[0].t + t0))


def test_a_starving_window_shows_the_slowest_rank_and_the_busy_actor(pool, T0):
    feed(pool, T0, 11.2)  # one actor, before the pool grew
    w = pool.window(T0 + 11.2)
    # rank 1 waited 2.49 of its 3.23 s of steps in the window; rank 0 much less: rank 1 counts
    assert w.wait == pytest.approx((1.39 + 1.1 + 1.7) / (1.8 + 1.43 + 2.4), abs=0.02)
    assert (w.actors, w.steps) == (1, 12)
    assert w.busy > 0.9  # the one actor decoded all the time


def test_a_grown_pool_feeds_the_trainers(pool, T0):
    feed(pool, T0, 30)
    w = pool.window(T0 + 18.4)
    assert w.actors == 4  # three more actors reported from 11.5 s on
    assert w.wait == pytest.approx((0.23 + 0.12 + 0.21 + 0.22) / (1.25 + 1.16 + 1.15 + 1.1),
                                   abs=0.01)  # down from 74%: below the grow threshold
    pool.tick(T0 + 18.4)
    assert pool.samples[-1]["actors"] == 4 and pool.samples[-1]["target"] is None


def test_epoch_totals_wait_for_every_rank(pool, T0, monkeypatch):
    judged = []
    monkeypatch.setattr(pool, "epoch_end", judged.append)
    pool.observe(RankWait(rank=0, wait_s=0.0, step_s=0.5, steps=1, t=T0 + 20, epoch_done=1))
    assert not judged  # rank 1 is still training
    pool.observe(RankWait(rank=1, wait_s=0.0, step_s=0.5, steps=1, t=T0 + 20.1,
                          epoch_done=1))
    assert judged == [1]


def test_every_epoch_leaves_its_totals_for_the_summary(pool, T0):
    feed(pool, T0, 30)
    waits = {r: [sum(p.wait_s for p in RECORDED if isinstance(p, RankWait) and p.rank == r),
                 sum(p.step_s for p in RECORDED if isinstance(p, RankWait) and p.rank == r)]
             for r in (0, 1)}
    work = sum(p.busy_s for p in RECORDED if isinstance(p, DecodeBusy))
    for rank in (0, 1):
        pool.observe(RankWait(rank=rank, wait_s=0.0, step_s=0.0, steps=0, t=T0 + 31,
                              epoch_done=1))
    [epoch] = pool.summary()["epochs"]
    assert epoch["epoch"] == 1 and epoch["size"] is None  # passive: Ray Data sized the pool
    assert epoch["wait"] == pytest.approx(max(w / s for w, s in waits.values()))
    assert epoch["work_s"] == pytest.approx(work)
    assert epoch["train_s"] == pytest.approx(max(s for _, s in waits.values()))
    assert epoch["start"] <= epoch["end"]  # the controller's clock: from its start
    for rank in (0, 1):  # the next epoch's totals start afresh, from the last one's end
        pool.observe(RankWait(rank=rank, wait_s=0.5, step_s=1.0, steps=2, t=T0 + 40,
                              epoch_done=2))
    second = pool.epochs[1]
    assert (second["wait"], second["work_s"], second["start"]) == (0.5, 0.0, epoch["end"])


def test_the_run_says_whether_its_decode_actors_waited_or_computed(pool, T0):
    feed(pool, T0, 30)  # recorded before readers measured CPU time: no share to claim
    assert pool.cpu_share() is None and pool.summary()["decode_cpu_share"] is None
    for i in range(4):  # a reader waiting on storage: 0.9 s decoding, 0.05 s of it on a CPU
        pool.observe(DecodeBusy(actor="a", busy_s=0.9, t=T0 + 31 + i, cpu_s=0.05))
    assert pool.cpu_share() == pytest.approx(0.05 / 0.9)
    assert pool.summary()["decode_busy_s"] == pytest.approx(3.6)


def test_a_grow_the_cpus_cannot_hold_says_so(tmp_path, T0, monkeypatch):
    """The issue-31 probe: 1 CPU for preprocessing at 1 CPU an actor; the pool "grew" 1 -> 4
    and nothing changed, without a word that the CPUs, not its max, held it."""
    import pipeline.pool.controller as controller
    from pipeline.pool.policy import Decision

    monkeypatch.setattr(controller, "pool_cpus", lambda placement: 1.0)
    config = load_config({"data": {"concurrency": [1, 4], "cpus_per_actor": 1,
                                   "placement": {"labels": {"role": "pre"}}}}).data
    limits = []
    board = SimpleNamespace(set_pool_cpus=SimpleNamespace(remote=limits.append))
    pool = PoolController(config, board=board, run="t", metrics_path=tmp_path / "m.jsonl",
                          console=Quiet(), world_size=2, act=True)
    pool._change(Decision(4, "grow", "1 actor(s) deliver 4% of the demand"), T0,
                 wait=0.96, busy=0.88, actors=1)
    [record] = pool.decisions
    assert record["held_by_cpus"] == 1 and limits[-1] == 1.0
    assert record["reason"].endswith("but the 1 CPU(s) it can have hold only 1 actor(s) at "
                                     "data.cpus_per_actor 1 (the diagnosis says what can work)")
    [line] = (tmp_path / "m.jsonl").read_text().splitlines()
    assert json.loads(line)["held_by_cpus"] == 1


def test_one_task_at_a_time_over_several_processes_is_a_pool_of_one(tmp_path, T0):
    """Ray runs each decode task in whichever worker process is idle: a pool of one task at a
    time (the controller's size 1) reports from several processes, each busy part of the
    window. That is one busy slot, not three idle ones: judged so, the pool grows."""
    config = load_config({"data": {"concurrency": [1, 8], "autoscale_cooldown_s": 1}}).data
    pool = PoolController(config, board=None, run="t", metrics_path=tmp_path / "m.jsonl",
                          console=Quiet(), world_size=2, act=False)
    pool.act, pool.size = True, 1  # acting, at one task at a time; no board to set
    for i in range(8):  # 0.5 s of decoding every 0.5 s, from three processes in turn
        pool.observe(DecodeBusy(actor=f"p{i % 3}", busy_s=0.5, t=T0 + 0.5 * i))
        pool.observe(RankWait(rank=i % 2, wait_s=0.4, step_s=0.6, steps=2, t=T0 + 0.5 * i))
    w = pool.window(T0 + 4.0)
    assert (w.actors, w.busy) == (1, 1.0) and w.wait > 0.5


def test_a_short_decoding_epoch_is_sized_from_its_first_rates(tmp_path, T0, monkeypatch):
    """One decoding epoch of about 20 s at one task at a time (elastic.py, cache memory): the
    first window with training steps has both rates (a task decodes 39 rows/s, the trainers
    eat about 190 rows/s when fed) and the pool grows to what they need at once, where the
    wait alone allowed 1 -> 4 and a second step after the cooldown. The new processes' first
    pulse prices the next start; the rates hold the pool while they start and after."""
    import pipeline.pool.controller as controller

    monkeypatch.setattr(controller, "pool_cpus", lambda placement: 6.0)  # the run's 6 CPUs
    config = load_config({"data": {"concurrency": [1, 8], "cpus_per_actor": 0.5,
                                   "autoscale_cooldown_s": 1}}).data
    limits, judged = [], []
    board = SimpleNamespace(set_pool_cpus=SimpleNamespace(remote=limits.append),
                            set_judged=SimpleNamespace(remote=judged.append))
    pool = PoolController(config, board=board, run="t", metrics_path=tmp_path / "m.jsonl",
                          console=Quiet(), world_size=2, act=True, run_epochs=3,
                          rows_per_epoch=1690)
    ticks = []
    for p in SHORT:
        p = replace(p, t=p.t - SHORT[0].t + T0)
        pool.observe(p)
        if p.t - pool._ticked >= controller.TICK_S:
            ticks.append((p.t, pool.window(p.t)))
        pool.tick(p.t)
    first_steps = next(t for t, w in ticks if w.steps)
    [grow] = pool.decisions  # one change: no second grow after the cooldown
    assert (grow["action"], grow["size_before"], grow["size_after"]) == ("grow", 1, 8)
    assert grow["t"] == first_steps  # the first window with steps: no settling on a rate
    assert "a decode task delivers 39 rows/s, so 8 at ~75% busy" in grow["reason"]
    assert limits == [0.5, 4.0]  # one task's CPUs, then eight's
    new = next(p for p in SHORT if isinstance(p, DecodeBusy) and p.actor != SHORT[0].actor)
    assert pool.startup_s == pytest.approx(new.t - SHORT[0].t + T0 - grow["t"])
    assert pool.startup_s > 10  # measured: six processes started at once on 2 cores
    samples = [s for s in pool.samples if s["t"] > grow["t"] + 14]  # the new ones decoded
    assert samples and all(s["wait"] < 0.1 for s in samples)  # and fed the trainers
    assert judged == [1] and pool.epochs[0]["size"] == 8  # the epoch's end keeps them


@pytest.mark.parametrize("cache, epochs_done, priced", [
    ("off", 0, False),  # every later epoch decodes too: a bigger pool pays off there
    ("off", 2, True),  # the last epoch: nothing after it
    ("memory", 0, True),  # the cache replays epochs 2 and 3
])
def test_growth_is_priced_only_where_no_later_epoch_decodes(tmp_path, T0, cache, epochs_done,
                                                            priced):
    config = load_config({"data": {"concurrency": [1, 8], "cache": cache}}).data
    pool = PoolController(config, board=None, run="t", metrics_path=tmp_path / "m.jsonl",
                          console=Quiet(), world_size=2, act=False, run_epochs=3,
                          rows_per_epoch=1690)
    for epoch in range(1, epochs_done + 1):
        for rank in (0, 1):
            pool.observe(RankWait(rank=rank, wait_s=0.0, step_s=5.0, steps=10, t=T0,
                                  epoch_done=epoch))
    pool.observe(DecodeBusy(actor="a", busy_s=1.0, t=T0 + 1, rows=1300))  # 390 rows left
    window = pool.window(T0 + 2)
    assert window.rate == 1300.0
    assert pool.finish_s(window) == (pytest.approx(390 / 1300) if priced else None)


def test_a_window_cut_short_by_a_change_does_not_read_one_task_as_many(pool):
    """Measured in the multi-node run: a tick 0.07 s after the cut the controller makes at a
    change read one task's pulse (1.2 s of decoding) as 17 tasks at once."""
    cut = pool._changed + pool.config.autoscale_cooldown_s / 2  # before it, the old pool
    pool.observe(DecodeBusy(actor="a", busy_s=1.2, t=cut + 0.05, rows=64))
    w = pool.window(cut + 0.07)
    assert w.actors == 1 and w.decoding == pytest.approx(1.2)  # over at least one pulse's span
