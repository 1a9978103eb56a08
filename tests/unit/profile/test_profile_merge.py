"""Merging ranks on the driver, combining epochs, and the scaling report (pure)."""

import json

import pytest
from conftest import BALANCED, rank_summary

from pipeline.profile import PHASES, combine_summaries, merge_ranks, scaling_report


def test_merge_averages_shares_and_keeps_every_rank(make_ranks):
    ranks = make_ranks(3, slow={2: {"data_wait": 0.2}})
    merged = merge_ranks(ranks)
    assert merged["ranks"] == [0, 1, 2]
    assert set(merged["per_rank"]) == {"0", "1", "2"}
    shares = [merged["per_rank"][r]["fractions"]["data_wait"] for r in "012"]
    assert merged["data_wait_fraction"] == pytest.approx(sum(shares) / 3)
    assert shares[2] > shares[0] == shares[1]
    for row in merged["per_rank"].values():
        assert sum(row["fractions"].values()) == pytest.approx(1.0)
    assert sum(merged["step_breakdown"].values()) == pytest.approx(merged["step_s"]["mean"])
    # Three ranks running side by side: the job's rate is the sum of theirs.
    assert merged["samples_per_s"] == pytest.approx(
        sum(s["samples"] / s["wall_s"] for s in ranks.values()))


def test_merge_reads_back_its_own_json(make_ranks):
    ranks = make_ranks(2)
    from_json = json.loads(json.dumps({str(r): s for r, s in ranks.items()}))
    assert merge_ranks(from_json) == merge_ranks(ranks)


def test_work_excludes_the_wait_for_peers():
    merged = merge_ranks({0: rank_summary(0, {"forward": 0.1, "comm_exposed": 0.05}),
                          1: rank_summary(1, {"forward": 0.15})})
    assert merged["per_rank"]["0"]["work_s"] == pytest.approx(0.1)
    assert merged["per_rank"]["1"]["work_s"] == pytest.approx(0.15)


def test_ranks_without_steps_are_left_out():
    merged = merge_ranks({0: rank_summary(0, BALANCED), 1: rank_summary(1, BALANCED, steps=0)})
    assert merged["ranks"] == [0]


def test_combining_epochs_adds_sums_and_keeps_the_worst_p99():
    a = rank_summary(0, {"forward": 0.1}, steps=10)
    b = rank_summary(0, {"forward": 0.3}, steps=30)
    both = combine_summaries([a, b, rank_summary(0, {}, steps=0)])
    assert both["steps"] == 40 and both["samples"] == a["samples"] + b["samples"]
    assert both["phases"]["forward"]["sum"] == pytest.approx(10.0)
    assert both["phases"]["forward"]["p99"] == pytest.approx(0.3)
    assert both["phases"]["forward"]["p50"] == pytest.approx((0.1 * 10 + 0.3 * 30) / 40)
    assert set(both["phases"]) == set(PHASES)
    with pytest.raises(ValueError, match="steps > 0"):
        combine_summaries([])


def scaling_run(workers, **per_step):
    ranks = {r: rank_summary(r, {**BALANCED, **per_step}) for r in range(workers)}
    return {"workers": workers, "merged": merge_ranks(ranks)}


def test_scaling_attributes_lost_throughput_to_the_phase_that_grew():
    report = scaling_report([scaling_run(4, comm_exposed=0.09), scaling_run(1),
                             scaling_run(2, comm_exposed=0.012)])
    assert report["base_workers"] == 1
    by = {r["workers"]: r for r in report["runs"]}
    assert by[1]["efficiency"] == pytest.approx(1.0)
    assert by[2]["efficiency"] > 0.95 and by[2]["main_cause"] is None
    assert "scales well" in by[2]["explanation"]
    # 4 workers: each step is 0.08 s longer, all of it exposed all-reduce.
    assert by[4]["efficiency"] == pytest.approx(0.16 / 0.24)
    assert by[4]["main_cause"] == "comm_exposed"
    assert by[4]["attribution_share"]["comm_exposed"] == pytest.approx(1.0)
    assert "collective.comm_hook" in by[4]["explanation"]
    assert report["summary"].startswith("4 workers:")


def test_scaling_compares_per_sample_when_batch_sizes_differ():
    base = scaling_run(1)
    bigger = {r: rank_summary(r, {k: v * 2 for k, v in BALANCED.items()}, samples_per_step=64)
              for r in range(2)}
    report = scaling_report([base, {"workers": 2, "merged": merge_ranks(bigger)}])
    two = report["runs"][1]
    assert two["efficiency"] == pytest.approx(1.0)
    assert all(abs(v) < 1e-12 for v in two["attribution"].values())


def test_scaling_needs_runs():
    with pytest.raises(ValueError, match="--workers"):
        scaling_report([])
