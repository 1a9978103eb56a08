"""StepProfiler: phases, the derived `other`, carving, trace, epoch windows.

Every test but one runs on a virtual clock (tests/unit/train/fake_worker.py's VirtualClock), so
every duration is exact: the first tests drive spans by hand, the rest the real worker loop
driven by fakes (fake_worker.py), so every second can be accounted for. One test reads the host
clock, for the Unix timestamps of its trace.
"""

import json
import time

import pytest
import torch

from pipeline.profile import PHASES, StepProfiler, combine_summaries, merge_ranks
from tests.unit.train.fake_worker import Epoch, VirtualClock, run, run_epoch

CPU = torch.device("cpu")


def profiler(**kwargs):
    """A profiler on a virtual clock, and the clock."""
    clock = VirtualClock()
    return StepProfiler(rank=kwargs.pop("rank", 0), device=CPU, clock=clock, **kwargs), clock


def one_step(prof, clock, *, wait=0.001, fwd=0.02, bwd=0.002, opt=0.0005, samples=8, h2d=None):
    with prof.span("data_wait"):
        clock.advance(wait)
    if h2d is not None:
        prof.add("h2d", h2d, within="data_wait")
    with prof.span("forward"):
        clock.advance(fwd)
    with prof.span("backward"):
        clock.advance(bwd)
    with prof.span("optimizer"):
        clock.advance(opt)
    prof.step_done(samples=samples)


def test_phases_follow_the_work_and_add_up_to_the_wall():
    prof, clock = profiler()
    for _ in range(4):
        one_step(prof, clock, fwd=0.02, bwd=0.002)
    s = prof.epoch_summary()
    ph = s["phases"]
    assert s["steps"] == 4 and s["samples"] == 32
    assert set(ph) == set(PHASES)
    assert ph["forward"]["sum"] > ph["backward"]["sum"] > 0
    assert ph["forward"]["sum"] == pytest.approx(4 * 0.02)
    assert ph["backward"]["sum"] == pytest.approx(4 * 0.002)
    assert ph["forward"]["p50"] == pytest.approx(0.02)
    assert ph["comm_exposed"]["sum"] == 0.0 and ph["h2d"]["sum"] == 0.0
    # `other` is what the named phases do not cover, so everything adds up to the wall.
    assert sum(p["sum"] for p in ph.values()) == pytest.approx(s["wall_s"], rel=1e-9)
    assert s["wall_s"] == pytest.approx(clock.now)
    assert s["step_s"]["p99"] >= s["step_s"]["p50"] > 0
    json.dumps(s)


def test_time_outside_spans_is_other():
    prof, clock = profiler()
    for _ in range(3):
        with prof.span("forward"):
            clock.advance(0.001)
        clock.advance(0.02)  # e.g. logging between the optimizer and the next batch
        prof.step_done(samples=1)
    ph = prof.epoch_summary()["phases"]
    assert ph["other"]["sum"] > ph["forward"]["sum"]
    assert ph["other"]["sum"] == pytest.approx(3 * 0.02)
    assert ph["forward"]["sum"] == pytest.approx(3 * 0.001)


def test_added_duration_is_carved_out_of_its_span():
    prof, clock = profiler()
    for _ in range(3):
        one_step(prof, clock, wait=0.01, h2d=0.004)
    ph = prof.epoch_summary()["phases"]
    assert ph["h2d"]["sum"] == pytest.approx(0.012)
    assert ph["data_wait"]["sum"] == pytest.approx(0.03 - 0.012)  # 10 ms per step minus 4 carved


def test_carving_more_than_the_span_held_is_clamped():
    prof, clock = profiler()
    one_step(prof, clock, wait=0.001, h2d=5.0)
    s = prof.epoch_summary()
    assert s["phases"]["data_wait"]["sum"] == 0.0
    # not the 5 s claimed: only what data_wait held
    assert s["phases"]["h2d"]["sum"] == pytest.approx(0.001)
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"], rel=1e-9)


def test_time_between_epochs_is_not_charged_to_a_step():
    prof, clock = profiler()
    one_step(prof, clock)
    prof.epoch_summary()
    clock.advance(0.15)  # validation, checkpointing...
    one_step(prof, clock, fwd=0.001)
    s = prof.epoch_summary()
    assert s["steps"] == 1 and s["wall_s"] < 0.15
    assert s["wall_s"] == pytest.approx(0.001 + 0.001 + 0.002 + 0.0005)  # the step alone


def test_trace_keeps_only_recent_steps_with_one_track_per_phase():
    prof, clock = profiler(rank=3, trace_steps=2)
    for _ in range(5):
        one_step(prof, clock, wait=0.001, fwd=0.001, bwd=0.001, h2d=0.0005)
    events = prof.trace_events()
    steps = sorted({e["args"]["step"] for e in events})
    assert steps == [3, 4]
    assert {e["pid"] for e in events} == {3}
    by_name = {e["name"]: e["tid"] for e in events if e["cat"] == "phase"}
    assert len(set(by_name.values())) == len(by_name)  # one track per phase
    assert {"data_wait", "h2d", "forward", "backward", "optimizer"} <= set(by_name)
    for e in events:
        assert e["ph"] == "X" and e["dur"] >= 0 and e["ts"] > 1.6e15  # Unix microseconds
    step4 = next(e for e in events if e["name"] == "step 4")
    fwd4 = next(e for e in events if e["name"] == "forward" and e["args"]["step"] == 4)
    assert step4["ts"] <= fwd4["ts"] and fwd4["ts"] + fwd4["dur"] <= step4["ts"] + step4["dur"]
    assert fwd4["dur"] == pytest.approx(1000, abs=1)  # 1 ms in microseconds


def test_the_host_clock_puts_the_trace_at_unix_time():
    # The default clock on a CPU: real perf_counter marks, placed on the Unix timeline.
    prof = StepProfiler(rank=0, device=CPU, trace_steps=1)
    before = time.time()
    for span in ("data_wait", "forward", "backward", "optimizer"):
        with prof.span(span):
            pass
    prof.step_done(samples=1)
    after = time.time()
    events = prof.trace_events()
    assert {e["name"] for e in events} >= {"step 0", "forward"}
    slack = 1000  # microseconds: the clock's two anchors are read one after the other
    for e in events:
        assert before * 1e6 - slack <= e["ts"] <= e["ts"] + e["dur"] <= after * 1e6 + slack
    s = prof.epoch_summary()
    assert 0 < s["wall_s"] <= after - before
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"], rel=1e-9)


def test_disabled_profiler_records_nothing():
    prof, clock = profiler(enabled=False)
    for _ in range(3):
        one_step(prof, clock, fwd=0.001, h2d=0.1)
    s = prof.epoch_summary()
    assert s["steps"] == 0 and s["wall_s"] == 0.0
    assert prof.trace_events() == []
    assert prof.span("forward") is prof.span("backward")  # one shared no-op


def test_unknown_phases_are_rejected_with_the_list():
    prof = StepProfiler(rank=0, device=CPU)
    with pytest.raises(ValueError, match="data_wait, h2d, forward"):
        prof.span("fwd")
    with pytest.raises(ValueError, match="derived"):
        prof.span("other")
    with pytest.raises(ValueError, match="unknown profile phase 'bwd'"):
        prof.add("h2d", 0.1, within="bwd")
    with pytest.raises(ValueError, match="trace_steps"):
        StepProfiler(rank=0, device=CPU, trace_steps=-1)


def test_many_steps_are_resolved_in_batches_without_losing_any():
    prof = StepProfiler(rank=0, device=CPU, trace_steps=5)
    for i in range(37):
        with prof.span("forward"):
            pass
        prof.step_done(samples=i)
    s = prof.epoch_summary()
    assert s["steps"] == 37 and s["samples"] == sum(range(37))
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"], rel=1e-9)
    assert sorted({e["args"]["step"] for e in prof.trace_events()}) == [32, 33, 34, 35, 36]


# -- the real worker loop driven by fakes (tests/unit/train/fake_worker.py), virtual clock ----


def test_every_second_of_a_multi_epoch_run_is_counted_once():
    plans = [Epoch(startup=2.0, last_wait=0.5, validation=0.3, report=0.04, checkpoint=0.2,
                   tail=0.003, between=0.007) for _ in range(3)]
    windows, _, clock = run(plans)
    both = combine_summaries(windows)
    t = both["training"]
    assert t["wall_s"] == pytest.approx(clock.now)  # first start-up to the last checkpoint
    assert sum(t["phases"].values()) == pytest.approx(t["wall_s"])
    assert t["phases"]["startup"] == pytest.approx(3 * 2.0)
    assert t["phases"]["validation"] == pytest.approx(3 * 0.3)
    assert t["phases"]["report"] == pytest.approx(3 * 0.04)  # split across windows, not lost
    assert t["phases"]["checkpoint"] == pytest.approx(3 * 0.2)
    # the epoch's last data_wait (no batch) is counted, though it belongs to no step
    assert t["phases"]["data_wait"] == pytest.approx(3 * (4 * 0.01 + 0.5))
    assert t["phases"]["untracked"] == pytest.approx(3 * (0.003 + 0.007))
    assert t["phases"]["other"] == pytest.approx(0.0, abs=1e-9)


def test_steps_hold_no_time_from_between_epochs():
    # Before: the epoch's last data_wait stayed open, so validation, report, checkpoint and the
    # next start-up landed in the next epoch's first step as `other`.
    plans = [Epoch(startup=2.0, validation=0.3, checkpoint=0.2) for _ in range(3)]
    windows, _, _ = run(plans)
    for window, plan in zip(windows, plans, strict=False):
        assert window["steps"] == plan.steps
        assert window["phases"]["other"]["sum"] == pytest.approx(0.0, abs=1e-9)
    step = 0.01 + 0.02 + 0.03 + 0.005  # wait + forward + backward + optimizer
    both = combine_summaries(windows)
    assert both["steps"] == 15
    assert both["step_s"]["p99"] == pytest.approx(step)
    assert both["wall_s"] == pytest.approx(15 * step - 3 * 0.01)  # first steps: no data_wait
    assert windows[-1]["steps"] == 0  # the tail holds the last report's rest and checkpoint
    assert windows[-1]["training"]["phases"]["checkpoint"] == pytest.approx(0.2)


def test_report_time_is_split_at_the_summary_and_checkpoint_goes_to_the_next_window():
    windows, _, _ = run([Epoch(report=0.04, checkpoint=0.2)] * 2)
    first, second, tail = (w["training"]["phases"] for w in windows)
    assert first["report"] == pytest.approx(0.02) and first["checkpoint"] == 0.0
    assert second["report"] == pytest.approx(0.04) and second["checkpoint"] == pytest.approx(0.2)
    assert tail["report"] == pytest.approx(0.02) and tail["checkpoint"] == pytest.approx(0.2)
    assert [w["training"]["windows"][0]["epoch"] for w in windows] == [1, 2, 2]


def test_carved_h2d_and_exposed_all_reduce_stay_inside_the_step():
    windows, _, _ = run([Epoch(data_wait=0.05, h2d=0.02, comm=0.04, backward=0.01)])
    s = windows[0]
    assert s["phases"]["h2d"]["sum"] == pytest.approx(4 * 0.02)
    assert s["phases"]["data_wait"]["sum"] == pytest.approx(4 * 0.03)
    assert s["phases"]["comm_exposed"]["sum"] == pytest.approx(5 * 0.04)
    assert s["phases"]["backward"]["sum"] == pytest.approx(5 * 0.01)
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"])


def test_a_peer_waiting_for_its_batch_is_charged_to_input_not_communication():
    # Two ranks share a slow preprocessing stream and wait at alternate steps; each waits for
    # the other inside the all-reduce. Per step the slowest rank's wait is what both waited for.
    n = 9
    wait = [0.0] + [0.2 if i % 2 else 0.0 for i in range(1, n)]
    other = [0.0] + [0.0 if i % 2 else 0.2 for i in range(1, n)]
    comm_true = 0.005
    plans = {0: Epoch(steps=n, waits=wait, comms=[comm_true + (0.2 - w) if i else comm_true
                                                   for i, w in enumerate(wait)]),
             1: Epoch(steps=n, waits=other, comms=[comm_true + (0.2 - w) if i else comm_true
                                                    for i, w in enumerate(other)])}
    peer = [max(a, b) for a, b in zip(plans[0].step_waits(), plans[1].step_waits(),
                                      strict=True)]
    ranks = {r: combine_summaries(run([p], rank=r, peer_waits=[peer])[0])
             for r, p in plans.items()}
    for s in ranks.values():
        assert s["training"]["input_comm_s"] == pytest.approx((n - 1) / 2 * 0.2)
        assert s["training"]["startup_comm_s"] == 0.0
    costs = merge_ranks(ranks)["training"]["costs"]
    comm_s = n * comm_true
    wall = ranks[0]["training"]["wall_s"]
    assert costs["communication"] == pytest.approx(comm_s / wall)
    last = plans[0].last_wait  # the epoch's last data_wait, outside any step
    assert costs["input"] == pytest.approx(((n - 1) * 0.2 + last) / wall)
    # without the per-step correction, half of the input wait reads as communication
    alone = merge_ranks({r: combine_summaries(run([p], rank=r)[0]) for r, p in plans.items()})
    assert alone["training"]["costs"]["communication"] > 10 * costs["communication"]


def test_a_peer_slower_to_start_is_charged_to_startup():
    fast, slow = Epoch(startup=1.0, comms=[0.5, 0, 0, 0, 0]), Epoch(startup=1.5)
    peer = [max(a, b) for a, b in zip(fast.step_waits(), slow.step_waits(), strict=True)]
    s = combine_summaries(run([fast], peer_waits=[peer])[0])
    assert s["training"]["startup_comm_s"] == pytest.approx(0.5)
    assert s["training"]["input_comm_s"] == 0.0


def test_reading_without_reset_changes_nothing():
    clock = VirtualClock()
    prof = StepProfiler(rank=0, device="cpu", clock=clock)
    plan = Epoch()
    run_epoch(prof, clock, plan, epoch=1)
    with prof.phase("validation"):
        clock.advance(1.0)
        a = prof.epoch_summary(reset=False)
        b = prof.epoch_summary(reset=False)
    # the epoch's own validation ran after its summary (after its checkpoint): in this window
    assert a == b and a["training"]["phases"]["validation"] == pytest.approx(1.0 + plan.validation)
    after = prof.epoch_summary()
    assert after["training"]["phases"]["validation"] == pytest.approx(1.0 + plan.validation)


def test_work_per_step_is_step_time_minus_exposed_all_reduce_over_the_run():
    windows, prof, _ = run([Epoch(comm=0.02), Epoch(comm=0.04, forward=0.1)])
    both = combine_summaries(windows)
    assert prof.work_per_step() == pytest.approx(
        (both["wall_s"] - both["phases"]["comm_exposed"]["sum"]) / both["steps"])
    assert merge_ranks({0: both})["per_rank"]["0"]["work_s"] == pytest.approx(
        prof.work_per_step())


def test_timeline_shows_the_out_of_step_phases_and_the_last_wait():
    _, prof, _ = run([Epoch()] * 3, trace_steps=6)
    events = prof.trace_events()
    epoch_events = [e for e in events if e["cat"] == "epoch"]
    names = {e["name"] for e in epoch_events}
    assert {"startup", "validation", "report", "checkpoint", "data_wait"} <= names
    tracks = {e["name"]: e["tid"] for e in epoch_events}
    assert len(set(tracks.values())) == len(tracks)
    # only the phases from the window of the oldest traced step on (epochs 2 and 3)
    assert len([e for e in epoch_events if e["name"] == "startup"]) == 2
    for e in events:
        assert e["dur"] >= 0


def test_phases_do_not_nest_and_hold_no_steps():
    prof = StepProfiler(rank=0, device=CPU, clock=VirtualClock())
    with prof.phase("validation"):
        with pytest.raises(ValueError, match="do not nest"):
            prof.phase("checkpoint").__enter__()
        with pytest.raises(ValueError, match="hold no steps"):
            prof.span("forward").__enter__()
    with pytest.raises(ValueError, match="startup, validation, report, checkpoint"):
        prof.phase("eval")
    with pytest.raises(ValueError, match="phase\\(\\)"):
        prof.span("validation")
    off = StepProfiler(rank=0, device=CPU, enabled=False)
    assert off.phase("startup") is off.span("forward")
    assert off.step_waits() == []
