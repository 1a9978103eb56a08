"""The tuner's decisions: keep what helped, revert what did not, stop when no advice or budget
is left."""

import pytest

from pipeline.tune.decide import (
    Budget,
    Change,
    Outcome,
    Probe,
    Trial,
    fallback_changes,
    judge,
    merged,
    next_changes,
    parse_changes,
    stop_reason,
    training_rate,
    untried,
)

MORE_ACTORS = Change(key="data.concurrency", value=[1, 4], why="input-bound")


def probe(rate, verdict="input_bound", changes=(MORE_ACTORS,)):
    return Probe(samples_per_s=rate, verdict=verdict, changes=tuple(changes), seconds=60.0)


def test_trials_are_judged_on_the_training_phase_not_the_fixed_start_up():
    # The breakdown of two real probes (tune benchmark, trial 1 vs 2): more actors cut epoch 1's
    # start-up by 3.5 s while the worker group took 4.1 s longer for no reason of the change.
    def summary(worker_group, epoch1_startup, epoch1_steady):
        rows = [("imports and config", 0.01), ("driver set-up", 0.3),
                ("worker group start", worker_group),
                ("epoch 1 start-up (first batch)", epoch1_startup),
                ("epoch 1 steady training", epoch1_steady),
                ("epoch 1 report, checkpoint and validation", 5.8),
                ("epoch 2 steady training", 0.7),
                ("epoch 3 steady training", 0.5), ("fit teardown", 0.7)]
        return {"samples": 4302, "breakdown": [{"phase": p, "seconds": s} for p, s in rows]}

    before, after = summary(12.81, 14.65, 4.43), summary(16.92, 11.11, 3.45)
    wall = {id(s): sum(r["seconds"] for r in s["breakdown"]) for s in (before, after)}
    probes = [Probe(samples_per_s=4302 / wall[id(s)], training_samples_per_s=training_rate(s),
                    verdict="startup_bound") for s in (before, after)]
    assert probes[1].samples_per_s < probes[0].samples_per_s * 1.03  # the job: within noise
    j = judge(*probes)
    assert j.keep and "1.21x" in j.reason  # the epochs: 26.1 s → 21.6 s
    assert training_rate({"samples": 10, "breakdown": []}) is None


def test_a_clear_gain_is_kept_and_tuning_goes_on():
    j = judge(probe(100), probe(180))
    assert j.keep
    assert "1.80x" in j.reason


def test_a_gain_with_the_same_verdict_is_kept():
    # more actors, still input-bound but faster: keep and let the next diagnosis ask for more
    j = judge(probe(100), probe(104))
    assert j.keep


def test_worse_beyond_noise_is_reverted():
    j = judge(probe(100), probe(96.9, verdict="compute_bound"))
    assert not j.keep
    assert "0.97x" in j.reason and "reverted" in j.reason


def test_noise_band_edges():
    assert judge(probe(100), probe(97.0)).keep is False  # within noise, same verdict: no gain
    assert judge(probe(100), probe(96.9)).reason.startswith("throughput fell")
    assert judge(probe(100), probe(103.0)).keep is False
    assert judge(probe(100), probe(103.1)).keep is True
    # a wider band (a noisy machine) turns a 5% loss into "no gain"
    assert judge(probe(100), probe(95), noise=0.1).reason.startswith("throughput within noise")


def test_a_verdict_that_stops_improving_is_reverted():
    j = judge(probe(100), probe(101))
    assert not j.keep
    assert "still input_bound" in j.reason


def test_verdict_that_moves_on_at_equal_throughput_is_kept():
    j = judge(probe(100), probe(101, verdict="compute_bound"))
    assert j.keep
    assert "input_bound → compute_bound" in j.reason


def test_moving_to_inconclusive_is_not_progress():
    j = judge(probe(100), probe(100, verdict="inconclusive"))
    assert not j.keep


def test_judge_refuses_an_empty_baseline():
    with pytest.raises(ValueError, match="at least one sample"):
        judge(probe(0), probe(10))


def test_untried_skips_current_values_reverted_changes_and_repeated_keys():
    changes = (Change(key="data.concurrency", value=[1, 4]),
               Change(key="transfer.host_prefetch", value=4),
               Change(key="data.concurrency", value=[2, 8]),
               Change(key="transfer.gpu_prefetch", value=2))
    current = {"data.concurrency": [1, 1], "transfer.host_prefetch": 2,
               "transfer.gpu_prefetch": 2}
    assert [c.key for c in untried(changes, current)] == ["data.concurrency",
                                                          "transfer.host_prefetch"]
    rejected = [Change(key="transfer.host_prefetch", value=4)]
    assert untried(changes, current, rejected) == (changes[0],)
    # tuple and list forms of the same value are the same value
    assert untried((Change(key="data.concurrency", value=[1, 1]),),
                   {"data.concurrency": (1, 1)}) == ()


def test_one_change_per_trial_the_first_the_diagnosis_names():
    changes = (Change(key="data.concurrency", value=[1, 4]),
               Change(key="transfer.host_prefetch", value=4))
    current = {"data.concurrency": [1, 1], "transfer.host_prefetch": 2}
    assert next_changes(changes, current) == (changes[0],)
    assert next_changes(changes, current, rejected=[changes[0]]) == (changes[1],)
    assert next_changes(changes, current, rejected=changes) == ()


def test_merged_replaces_a_kept_key_with_its_new_value():
    kept = (Change(key="data.concurrency", value=[1, 4]), Change(key="train.batch_size", value=64))
    assert merged(kept, (Change(key="data.concurrency", value=[1, 8]),)) == (
        kept[1], Change(key="data.concurrency", value=[1, 8]))


BUDGET = Budget(max_trials=3, budget_s=600)


def test_stop_at_max_trials():
    assert stop_reason(trials=3, budget=BUDGET, elapsed_s=10, probe_s=[5],
                       pending=[MORE_ACTORS], verdict="input_bound") == "reached --max-trials 3"
    assert stop_reason(trials=2, budget=BUDGET, elapsed_s=10, probe_s=[5],
                       pending=[MORE_ACTORS], verdict="input_bound") is None


def test_stop_at_budget_when_the_next_probe_would_end_past_it():
    # the longest probe so far took 200 s: with 420 s used, another would end at 620 > 600
    reason = stop_reason(trials=1, budget=BUDGET, elapsed_s=420, probe_s=[150, 200],
                         pending=[MORE_ACTORS], verdict="input_bound")
    assert reason is not None and "--budget-s 600" in reason
    assert stop_reason(trials=1, budget=BUDGET, elapsed_s=400, probe_s=[150, 200],
                       pending=[MORE_ACTORS], verdict="input_bound") is None


def test_stop_when_the_diagnosis_names_nothing_new():
    reason = stop_reason(trials=0, budget=BUDGET, elapsed_s=0, probe_s=[], pending=[],
                         verdict="compute_bound")
    assert reason is not None and "compute_bound" in reason


def test_budget_check_names_the_flag():
    assert Budget(max_trials=0, budget_s=0).check() == ["--max-trials (0) must be >= 1",
                                                       "--budget-s (0) must be > 0"]


def test_changes_come_from_the_diagnosis_when_it_has_them():
    diagnosis = {"verdict": "input_bound", "advice": ["..."],
                 "changes": [{"key": "data.concurrency", "value": [2, 4], "why": "busy"}]}
    changes, origin = parse_changes(diagnosis, {"data.concurrency": [1, 1]})
    assert origin == "diagnosis"
    assert changes == (Change(key="data.concurrency", value=[2, 4], why="busy"),)
    assert changes[0].as_set() == "data.concurrency=[2, 4]"
    # an empty list is the diagnosis saying "nothing to change", not a missing field
    assert parse_changes({"verdict": "input_bound", "changes": []},
                         {"data.concurrency": [1, 1]}) == ((), "diagnosis")
    with pytest.raises(ValueError, match="diagnosis.changes"):
        parse_changes({"verdict": "x", "changes": [{"value": 1}]}, {})


def test_fallback_scales_the_pool_by_the_wait_share_without_reading_advice_text():
    diagnosis = {"verdict": "input_bound", "advice": ["raise it to 99"],
                 "evidence": {"data_wait_fraction": 0.7, "data_saturated": True}}
    changes, origin = parse_changes(diagnosis, {"data.concurrency": [1, 1]})
    assert origin == "fallback"
    assert changes == (Change(key="data.concurrency", value=[1, 4],
                              why="trainers waited 70% of each step for input"),)
    # at least one more actor, at most 4x
    assert fallback_changes("input_bound", {"data_wait_fraction": 0.05},
                            {"data.concurrency": [1, 3]})[0].value == [1, 4]
    assert fallback_changes("input_bound", {"data_wait_fraction": 0.99},
                            {"data.concurrency": [2, 2]})[0].value == [2, 8]


def test_fallback_for_idle_preprocessing_deepens_prefetch():
    changes = fallback_changes("input_bound", {"data_wait_fraction": 0.5,
                                               "data_saturated": False},
                               {"transfer.host_prefetch": 2, "data.concurrency": [1, 1]})
    assert changes == (Change(key="transfer.host_prefetch", value=4,
                              why="trainers wait while preprocessing idles"),)


def test_fallback_names_nothing_for_other_verdicts():
    assert fallback_changes("compute_bound", {}, {"data.concurrency": [1, 1]}) == ()
    assert fallback_changes("straggler", {}, {}) == ()


def test_outcome_final_is_the_last_kept_probe():
    base = probe(100)
    better, worse = probe(180, verdict="compute_bound"), probe(90, verdict="compute_bound")
    trials = (Trial(number=1, changes=(MORE_ACTORS,), before=base, after=better, kept=True,
                    reason=""),
              Trial(number=2, changes=(Change(key="train.batch_size", value=64),),
                    before=better, after=worse, kept=False, reason=""))
    outcome = Outcome(baseline=base, trials=trials, kept=(MORE_ACTORS,))
    assert outcome.final is better
    assert outcome.gain == pytest.approx(1.8)
    assert trials[1].ratio == pytest.approx(0.5)
    assert Outcome(baseline=base).gain == 1.0
