"""Each verdict from synthetic span sets, the advice it gives, and the borderline rules."""

import json

import pytest
from conftest import rank_summary

from pipeline.profile import VERDICTS, ProfileConfig, diagnose, merge_ranks

CONTEXT = {"data.concurrency": [1, 2], "data.prefetch_batches": 2, "train.num_workers": 4,
           "transfer.gpu_prefetch": 2, "transfer.pin_memory": False,
           "transfer.ship_uint8": False, "collective.comm_hook": "none",
           "collective.bucket_cap_mb": 25.0, "device": "cuda"}
CONFIG = ProfileConfig()


def run(ranks, data_ops=(), context=CONTEXT, config=CONFIG):
    return diagnose(merge_ranks(ranks), list(data_ops), config, context)


def test_balanced_run_is_compute_bound_and_advises_more_workers(make_ranks):
    d = run(make_ranks(4))
    assert d.verdict == "compute_bound"
    assert "`train.num_workers` from 4 to 8" in d.advice[0]
    assert "also" not in d.evidence


def test_input_bound_with_saturated_preprocessing_advises_more_actors(make_ranks):
    # data_wait 0.104 s of a 0.254 s step: trainers wait 41%; the pool (2 slots) is 97% busy.
    ranks = make_ranks(2, data_wait=0.104)
    ops = [{"operator": "ReadParquet", "rows": 640, "busy_s": 0.5, "blocked_s": 0.0,
            "tasks": 4, "wall_s": 10.0},
           {"operator": "MapBatches(decode)", "rows": 640, "busy_s": 19.4, "blocked_s": 0.1,
            "tasks": 20, "wall_s": 10.0}]
    d = run(ranks, ops)
    assert d.verdict == "input_bound"
    assert d.advice[0] == ("input-bound: trainers waited 41% of each step; preprocessing actors "
                           "were busy 97% of the time → raise `data.concurrency` max from 2 to "
                           "4 or add CPU nodes")
    assert d.evidence["data_busiest_operator"] == "MapBatches(decode)"
    assert d.evidence["data_saturated"] is True


def test_input_bound_with_idle_preprocessing_advises_deeper_prefetch(make_ranks):
    ops = [{"operator": "MapBatches(decode)", "rows": 640, "busy_s": 4.0, "blocked_s": 3.0,
            "tasks": 20, "wall_s": 10.0}]
    d = run(make_ranks(2, data_wait=0.104), ops)
    assert d.verdict == "input_bound"
    assert "busy only 20%" in d.advice[0]
    assert "`data.prefetch_batches` from 2 to 4" in d.advice[0]
    assert "data.concurrency" not in d.advice[0]


def test_input_bound_without_preprocessing_stats_names_both_remedies(make_ranks):
    d = run(make_ranks(2, data_wait=0.2))
    assert d.verdict == "input_bound"
    assert "no preprocessing stats" in d.advice[0]
    assert "`data.concurrency` max from 2 to" in d.advice[0]
    assert "`data.prefetch_batches` from 2 to 4" in d.advice[0]
    assert d.evidence["data_busy_fraction"] is None


def test_transfer_bound_advises_prefetch_pinning_and_uint8(make_ranks):
    d = run(make_ranks(2, h2d=0.1))
    assert d.verdict == "transfer_bound"
    text = "\n".join(d.advice)
    assert "`transfer.gpu_prefetch` from 2 to 4" in text
    assert "`transfer.pin_memory: true`" in text
    assert "`transfer.ship_uint8: true`" in text


def test_communication_bound_advises_compression_and_bigger_buckets(make_ranks):
    d = run(make_ranks(2, comm_exposed=0.12))
    assert d.verdict == "communication_bound"
    assert d.advice[0].startswith("communication-bound: 44% of each step is exposed all-reduce")
    assert "`collective.comm_hook: bf16`" in d.advice[0]
    assert "`collective.bucket_cap_mb` (from 25 to 50)" in d.advice[0]
    cpu = run(make_ranks(2, comm_exposed=0.12), context={**CONTEXT, "device": "cpu"})
    assert "`collective.comm_hook: fp16`" in cpu.advice[0]  # bf16 hook needs NCCL
    done = run(make_ranks(2, comm_exposed=0.12),
               context={**CONTEXT, "collective.comm_hook": "bf16"})
    assert "`collective.comm_hook: powersgd`" in done.advice[0]


def test_straggler_names_the_slow_rank_and_wins_over_the_comm_wait_it_causes(make_ranks):
    # Rank 3's forward takes 0.06 s longer; the others wait for it in the all-reduce, which
    # alone would read as communication-bound (mean exposed share 27% > 25%).
    ranks = make_ranks(4, comm_exposed=0.08, slow={3: {"forward": 0.1, "comm_exposed": 0.01}})
    d = run(ranks)
    assert d.verdict == "straggler"
    assert d.advice[0].startswith("straggler: rank 3 is 40% slower than the median of the other "
                                  "ranks")
    assert "mostly in forward" in d.advice[0]
    assert "`train.num_workers` from 4 to 3" in d.advice[0]
    assert d.evidence["rank"] == 3 and d.evidence["cause_phase"] == "forward"
    assert d.evidence["also"] == ["communication_bound"]
    assert any(a.startswith("also: communication-bound") for a in d.advice)


def test_straggler_is_found_with_two_ranks(make_ranks):
    d = run(make_ranks(2, slow={0: {"backward": 0.2}}))
    assert d.verdict == "straggler"
    assert d.evidence["rank"] == 0 and d.evidence["cause_phase"] == "backward"


def test_a_single_rank_is_never_a_straggler():
    d = run({0: rank_summary(0, {"forward": 1.0})})
    assert d.verdict == "compute_bound"


def test_every_verdict_is_reachable_and_json_ready(make_ranks):
    cases = {
        "compute_bound": make_ranks(2),
        "input_bound": make_ranks(2, data_wait=0.2),
        "transfer_bound": make_ranks(2, h2d=0.2),
        "communication_bound": make_ranks(2, comm_exposed=0.2),
        "straggler": make_ranks(3, slow={1: {"forward": 0.3}}),
    }
    assert set(cases) == set(VERDICTS)
    for verdict, ranks in cases.items():
        d = run(ranks)
        assert d.verdict == verdict
        as_dict = json.loads(json.dumps(d.as_dict()))
        assert as_dict["verdict"] == verdict and as_dict["advice"]
        assert all("`" in line for line in as_dict["advice"])  # names a config key


# -- borderline cases (rules in pipeline/profile/diagnosis.py) --------------------------------


def exact(data_wait=0.0, comm=0.0, forward=0.5, backward=0.5, n=2):
    """Binary fractions so shares are exact: data_wait 0.25 of a 1.25 s step is exactly 0.2."""
    return {r: rank_summary(r, {"data_wait": data_wait, "comm_exposed": comm,
                                "forward": forward, "backward": backward}) for r in range(n)}


def test_share_equal_to_threshold_does_not_fire():
    d = run(exact(data_wait=0.25))
    assert d.evidence["data_wait_fraction"] == 0.2 == CONFIG.input_bound_fraction
    assert d.verdict == "compute_bound"
    assert run(exact(data_wait=0.2501)).verdict == "input_bound"


def test_equal_shares_go_to_input_before_communication():
    d = run(exact(data_wait=0.375, comm=0.375, forward=0.125, backward=0.125))
    assert d.evidence["data_wait_fraction"] == d.evidence["comm_exposed_fraction"]
    assert d.verdict == "input_bound"
    assert d.evidence["also"] == ["communication_bound"]


def test_largest_share_wins_among_input_transfer_and_communication():
    d = run(exact(data_wait=0.3, comm=0.5, forward=0.125, backward=0.125))
    assert d.verdict == "communication_bound"
    assert d.evidence["also"] == ["input_bound"]


def test_straggler_exactly_at_the_ratio_is_not_one():
    ranks = {0: rank_summary(0, {"forward": 1.0}), 1: rank_summary(1, {"forward": 1.25})}
    assert run(ranks).verdict == "compute_bound"
    ranks[1] = rank_summary(1, {"forward": 1.2501})
    assert run(ranks).verdict == "straggler"


def test_straggler_waiting_for_input_in_an_input_bound_job_is_input_bound(make_ranks):
    # Rank 1 waits longer for data; rank 0 waits for rank 1 in the all-reduce. The ranks share
    # one preprocessing stream, so the remedy is preprocessing capacity, not that rank.
    ranks = make_ranks(2, slow={0: {"data_wait": 0.1, "comm_exposed": 0.15},
                                1: {"data_wait": 0.25, "comm_exposed": 0.0}})
    d = run(ranks)
    assert d.verdict == "input_bound"
    assert d.evidence["also"] == ["straggler"]
    assert any("rank 1" in a and "data_wait" in a for a in d.advice)


def test_straggler_waiting_for_input_in_a_fed_job_stays_a_straggler(make_ranks):
    ranks = make_ranks(2, data_wait=0.0, slow={1: {"data_wait": 0.08}})
    d = run(ranks)
    assert d.evidence["data_wait_fraction"] < CONFIG.input_bound_fraction
    assert d.verdict == "straggler" and d.evidence["cause_phase"] == "data_wait"
    assert "`data.prefetch_batches` from 2 to 4" in d.advice[0]


def test_thresholds_come_from_the_config(make_ranks):
    ranks = make_ranks(2, data_wait=0.104)
    assert run(ranks).verdict == "input_bound"
    assert run(ranks, config=ProfileConfig(input_bound_fraction=0.5)).verdict == "compute_bound"


def test_advice_without_context_still_names_the_key(make_ranks):
    d = run(make_ranks(2, comm_exposed=0.2), context={})
    assert "`collective.comm_hook: fp16`" in d.advice[0]
    assert "`collective.bucket_cap_mb` (e.g. double it)" in d.advice[0]


def test_no_steps_is_an_error_that_says_why():
    with pytest.raises(ValueError, match="profile.enabled"):
        merge_ranks({0: rank_summary(0, {"forward": 0.1}, steps=0)})
