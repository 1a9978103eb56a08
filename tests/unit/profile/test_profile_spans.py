"""StepProfiler on the CPU with real work: phases, the derived `other`, carving, trace, reset."""

import json
import time

import pytest
import torch

from pipeline.profile import PHASES, StepProfiler

CPU = torch.device("cpu")


def one_step(prof, *, wait=0.001, fwd=0.02, bwd=0.002, opt=0.0005, samples=8, h2d=None):
    with prof.span("data_wait"):
        time.sleep(wait)
    if h2d is not None:
        prof.add("h2d", h2d, within="data_wait")
    with prof.span("forward"):
        time.sleep(fwd)
    with prof.span("backward"):
        time.sleep(bwd)
    with prof.span("optimizer"):
        time.sleep(opt)
    prof.step_done(samples=samples)


def test_phases_follow_the_work_and_add_up_to_the_wall():
    prof = StepProfiler(rank=0, device=CPU)
    for _ in range(4):
        one_step(prof, fwd=0.02, bwd=0.002)
    s = prof.epoch_summary()
    ph = s["phases"]
    assert s["steps"] == 4 and s["samples"] == 32
    assert set(ph) == set(PHASES)
    # Forward slept 10x longer than backward; ordering, not exact times.
    assert ph["forward"]["sum"] > ph["backward"]["sum"] > 0
    assert ph["forward"]["p50"] >= 0.02  # a sleep lasts at least its duration
    assert ph["comm_exposed"]["sum"] == 0.0 and ph["h2d"]["sum"] == 0.0
    # `other` is what the named phases do not cover, so everything adds up to the wall.
    assert sum(p["sum"] for p in ph.values()) == pytest.approx(s["wall_s"], rel=1e-9)
    assert s["step_s"]["p99"] >= s["step_s"]["p50"] > 0
    json.dumps(s)


def test_time_outside_spans_is_other():
    prof = StepProfiler(rank=0, device=CPU)
    for _ in range(3):
        with prof.span("forward"):
            time.sleep(0.001)
        time.sleep(0.02)  # e.g. logging between the optimizer and the next batch
        prof.step_done(samples=1)
    ph = prof.epoch_summary()["phases"]
    assert ph["other"]["sum"] > ph["forward"]["sum"]


def test_added_duration_is_carved_out_of_its_span():
    prof = StepProfiler(rank=0, device=CPU)
    for _ in range(3):
        one_step(prof, wait=0.01, h2d=0.004)
    ph = prof.epoch_summary()["phases"]
    assert ph["h2d"]["sum"] == pytest.approx(0.012)
    assert ph["data_wait"]["sum"] >= 0.03 - 0.012  # 10 ms sleep per step minus 4 ms carved


def test_carving_more_than_the_span_held_is_clamped():
    prof = StepProfiler(rank=0, device=CPU)
    one_step(prof, wait=0.001, h2d=5.0)
    s = prof.epoch_summary()
    assert s["phases"]["data_wait"]["sum"] == 0.0
    assert s["phases"]["h2d"]["sum"] < 0.5  # not the 5 s claimed: only what data_wait held
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"], rel=1e-9)


def test_time_between_epochs_is_not_charged_to_a_step():
    prof = StepProfiler(rank=0, device=CPU)
    one_step(prof)
    prof.epoch_summary()
    time.sleep(0.15)  # validation, checkpointing...
    one_step(prof, fwd=0.001)
    s = prof.epoch_summary()
    assert s["steps"] == 1 and s["wall_s"] < 0.15


def test_trace_keeps_only_recent_steps_with_one_track_per_phase():
    prof = StepProfiler(rank=3, device=CPU, trace_steps=2)
    for _ in range(5):
        one_step(prof, wait=0.001, fwd=0.001, bwd=0.001, h2d=0.0005)
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


def test_disabled_profiler_records_nothing():
    prof = StepProfiler(rank=0, device=CPU, enabled=False)
    for _ in range(3):
        one_step(prof, fwd=0.001, h2d=0.1)
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
