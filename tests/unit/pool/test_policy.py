"""The decode pool policy (pipeline.pool.policy): grow on the trainers' wait when the actors
are busy, shrink after an epoch nobody waited in to what its decoding needed, hold in between
and while new actors start. The numbers are what real runs measured (examples/quickstart.yaml,
25 ms injected per sample, 2 ranks; tests/integration/test_multinode.py runs the whole loop)."""

import pytest

from pipeline.pool.policy import EpochTotals, Window, decide, decide_epoch

COOLED = {"since_change_s": 60.0, "cooldown_s": 10.0}
SETTLED = {**COOLED, "settled_s": 60.0}


def test_a_starving_pool_grows_in_proportion_to_the_wait():
    # measured: one actor, trainers waiting 79% of their steps, the actor busy 91%
    d = decide(Window(wait=0.79, busy=0.91, actors=1, steps=40), size=1, low=1, high=8,
               **SETTLED)
    assert (d.action, d.size) == ("grow", 4)  # 1 / (1 - 0.79) = 4.8 actors, at most 4x at once
    assert "79%" in d.reason
    again = decide(Window(wait=0.15, busy=0.92, actors=4, steps=40), size=4, low=1, high=8,
                   **SETTLED)
    assert (again.action, again.size) == ("grow", 5)  # measured next: 4 / 0.85 = 4.7


def test_growth_is_at_least_one_actor_and_at_most_the_max():
    small = decide(Window(wait=0.11, busy=0.9, actors=8, steps=40), size=8, low=1, high=12,
                   **SETTLED)
    assert (small.action, small.size) == ("grow", 9)
    capped = decide(Window(wait=0.95, busy=1.0, actors=2, steps=10), size=2, low=1, high=6,
                    **SETTLED)
    assert capped.size == 6  # 2 / 0.05 = 40, at most 4x and never above data.concurrency max


def test_at_the_max_it_holds_and_says_so():
    d = decide(Window(wait=0.5, busy=0.95, actors=4, steps=30), size=4, low=1, high=4,
               **SETTLED)
    assert d.action == "hold" and "data.concurrency max (4)" in d.reason


def test_waiting_trainers_with_idle_actors_are_not_a_pool_shortage():
    d = decide(Window(wait=0.6, busy=0.2, actors=4, steps=30), size=4, low=1, high=8,
               **SETTLED)
    assert d.action == "hold" and "not a pool shortage" in d.reason


def test_an_epoch_the_trainers_did_not_wait_shrinks_the_pool_to_its_work():
    # measured (tests/integration/multinode_run.py): 8 actors decoded the epoch in seconds and
    # stopped; its 39 actor-seconds of decoding over 31 s of training need 2 actors at 75%
    d = decide_epoch(EpochTotals(wait=0.003, work_s=39.0, train_s=31.0), size=8, low=1,
                     **COOLED)
    assert (d.action, d.size) == ("shrink", 2)
    assert decide_epoch(EpochTotals(wait=0.0, work_s=5.0, train_s=30.0), size=8, low=3,
                        **COOLED).size == 3  # never below data.concurrency min


@pytest.mark.parametrize("epoch, why", [
    (EpochTotals(wait=0.05, work_s=39.0, train_s=31.0), "waited 5.0%"),  # they still waited
    (EpochTotals(wait=0.0, work_s=0.0, train_s=31.0), "cache replay"),  # nothing decoded
    (EpochTotals(wait=0.0, work_s=170.0, train_s=31.0), "8 actor(s)"),  # all 8 were needed
])
def test_epochs_that_keep_the_pool(epoch, why):
    d = decide_epoch(epoch, size=8, low=1, **COOLED)
    assert (d.action, d.size) == ("hold", 8) and why in d.reason


@pytest.mark.parametrize("window, size, why", [
    (Window(wait=0.05, busy=0.4, actors=4, steps=50), 4, "trainers wait 5.0%"),  # the band
    (Window(wait=0.0, busy=0.1, actors=6, steps=50), 6, "trainers wait 0.0%"),  # shrink: later
    (Window(wait=0.9, busy=1.0, actors=1, steps=0), 1, "no training steps"),
    (Window(wait=0.0, busy=0.0, actors=0, steps=50), 4, "no decode"),  # buffered or cached
])
def test_windows_that_hold(window, size, why):
    d = decide(window, size=size, low=1, high=8, **SETTLED)
    assert (d.action, d.size) == ("hold", size) and why in d.reason


def test_no_change_during_the_cooldown_after_one():
    d = decide(Window(wait=0.8, busy=1.0, actors=1, steps=30), size=4, low=1, high=8,
               since_change_s=4.0, cooldown_s=10.0, settled_s=60.0)
    assert d.action == "hold" and "cooldown" in d.reason
    assert decide_epoch(EpochTotals(wait=0.0, work_s=39.0, train_s=31.0), size=8, low=1,
                        since_change_s=4.0, cooldown_s=10.0).action == "hold"


def test_a_window_of_a_pool_still_starting_is_not_judged():
    # measured (benchmarks/elastic.py, controller arm): 12 s after 1 → 4 the window held 4
    # actors busy 54% (two had just started) and the trainers waiting 56%; growing on it made 6
    # actors where 4 fed the trainers
    starting = Window(wait=0.56, busy=0.54, actors=4, steps=22)
    d = decide(starting, size=4, low=1, high=8, since_change_s=12.0, cooldown_s=10.0,
               settled_s=0.0)
    assert d.action == "hold" and "starting" in d.reason
    # once all four have decoded for a whole window, the same shortage grows the pool
    assert decide(Window(wait=0.15, busy=0.92, actors=4, steps=40), size=4, low=1, high=8,
                  since_change_s=16.0, cooldown_s=10.0, settled_s=4.0).action == "grow"
    # a pool Ray Data never fills (its queue is short) is judged anyway, after a while
    assert decide(Window(wait=0.5, busy=0.95, actors=3, steps=40), size=4, low=1, high=8,
                  since_change_s=31.0, cooldown_s=10.0, settled_s=0.0).action == "grow"


# measured (benchmarks/elastic.py's controller arm, short_epoch_pulses.jsonl): one task at a
# time delivers 39 rows per second of decoding; the trainers' steps, without their wait, eat
# 194 rows/s; they wait 81% of their step time
MEASURED = Window(wait=0.81, busy=0.93, actors=1, steps=4, rate=39.0, demand=194.0)


def test_measured_rates_size_the_pool_at_once():
    d = decide(MEASURED, size=1, low=1, high=8, **COOLED, settled_s=0.0)
    # a task at once delivers 39 rows/s x its 93% busy; 194 / (36.3 x 0.75) = 7.1: eight
    # tasks, not the four the wait alone allows (1 / 0.19, at most 4x)
    assert (d.action, d.size) == ("grow", 8)
    assert "eat 194 rows/s" in d.reason and "delivers 39 rows/s" in d.reason
    assert decide(MEASURED, size=1, low=1, high=5, **COOLED, settled_s=0.0).size == 5


def test_rates_that_the_pool_already_covers_hold_while_its_new_tasks_start():
    # just after 1 → 8 the trainers still wait for the tasks being started: the rates, which
    # do not depend on the pool, say eight are enough
    starting = {"since_change_s": 12.0, "cooldown_s": 10.0, "settled_s": 0.0}
    d = decide(MEASURED, size=8, low=1, high=12, **starting)
    assert (d.action, d.size) == ("hold", 8) and "keep up once they all run" in d.reason
    # without rates the same window is one of a pool still starting
    blind = Window(wait=0.81, busy=0.93, actors=1, steps=4)
    assert "starting" in decide(blind, size=8, low=1, high=12, **starting).reason


def test_a_settled_pool_the_rates_call_enough_grows_by_the_wait_if_the_trainers_still_wait():
    # seven tasks decoded for a whole window and the trainers still wait 30%: the rates missed
    # something (the tasks share CPUs, the ranks wait for each other); the wait sizes the pool
    still = Window(wait=0.30, busy=0.95, actors=8, steps=40, rate=39.0, demand=194.0)
    d = decide(still, size=8, low=1, high=16, **SETTLED)
    assert (d.action, d.size) == ("grow", 12)  # 8 / 0.7
    assert "8 actor(s) deliver 70% of the demand" in d.reason


@pytest.mark.parametrize("finish_s, action", [(1.5, "hold"), (30.0, "grow"), (None, "grow")])
def test_growth_is_priced_against_what_the_last_decoding_epoch_has_left(finish_s, action):
    # the running task finishes the last decoding epoch in finish_s; a new one starts in 12 s
    # (measured: six processes started at once on 2 cores); None: later epochs decode too
    d = decide(MEASURED, size=1, low=1, high=8, **COOLED, settled_s=0.0, finish_s=finish_s,
               startup_s=12.0)
    assert d.action == action
    if action == "hold":
        assert "finish the last decoding epoch in 1.5 s, before a new one starts" in d.reason
