"""Each verdict from synthetic span sets, the advice it gives, and the borderline rules."""

import json
import math
from pathlib import Path

import pytest
from conftest import rank_summary

from pipeline.collective.straggler import straggler_summary
from pipeline.config import load_config
from pipeline.profile import (
    VERDICTS,
    ProfileConfig,
    combine_summaries,
    context_from_config,
    diagnose,
    merge_ranks,
)
from pipeline.tune.decide import next_changes, parse_changes
from tests.unit.train import fake_worker
from tests.unit.train.fake_worker import Epoch

QUICKSTART = Path(__file__).resolve().parents[3] / "examples" / "quickstart.yaml"

CONTEXT = {"data.concurrency": [1, 2], "transfer.host_prefetch": 2, "train.num_workers": 4,
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
    assert d.advice[0] == ("input-bound: trainers waited for input 41% of the training phase; "
                           "preprocessing actors were busy 97% of the time → raise "
                           "`data.concurrency` max from 2 to 4 or add CPU nodes")
    assert d.changes == ({"key": "data.concurrency", "value": [1, 4],
                          "why": d.changes[0]["why"]},)
    assert d.evidence["data_busiest_operator"] == "MapBatches(decode)"
    assert d.evidence["data_saturated"] is True


def test_input_bound_on_a_users_ray_dataset_names_its_maps_not_feedlines_pool(make_ranks):
    # the same saturated run, from a `data.source.kind: ray` config: Feedline has no pool there
    cfg = load_config(QUICKSTART, ["data.source.kind=ray",
                                   "data.source.function=pkg.data:build"])
    context = context_from_config(cfg)
    assert "data.concurrency" not in context and context["data.source.kind"] == "ray"
    ops = [{"operator": "MapBatches(tokenize)", "rows": 640, "busy_s": 19.4, "blocked_s": 0.1,
            "tasks": 20, "wall_s": 10.0}]
    d = run(make_ranks(2, data_wait=0.104), ops, context=context)
    assert d.verdict == "input_bound"
    assert "`map_batches(concurrency=...)`" in d.advice[0]
    assert "data.concurrency" not in d.advice[0]
    assert all(c["key"] != "data.concurrency" for c in d.changes)


def test_input_bound_with_idle_preprocessing_advises_deeper_prefetch(make_ranks):
    ops = [{"operator": "MapBatches(decode)", "rows": 640, "busy_s": 4.0, "blocked_s": 3.0,
            "tasks": 20, "wall_s": 10.0}]
    d = run(make_ranks(2, data_wait=0.104), ops)
    assert d.verdict == "input_bound"
    assert "busy only 20%" in d.advice[0]
    assert "`transfer.host_prefetch` from 2 to 4" in d.advice[0]
    assert "data.concurrency" not in d.advice[0]


def test_input_bound_without_preprocessing_stats_names_both_remedies(make_ranks):
    d = run(make_ranks(2, data_wait=0.2))
    assert d.verdict == "input_bound"
    assert "no preprocessing stats" in d.advice[0]
    assert "`data.concurrency` max from 2 to" in d.advice[0]
    assert "`transfer.host_prefetch` from 2 to 4" in d.advice[0]
    assert d.evidence["data_busy_fraction"] is None


# The issue-31 probe: the quickstart with a transform that waits 6 ms a row, cache off,
# 3 epochs, on 2 cores: the plan gives preprocessing 1 CPU, an actor asks 1 CPU, and the
# advice to raise `data.concurrency` to [1, 4] changed nothing (1.00x).
PROBE = {**CONTEXT, "data.concurrency": [1, 4], "data.cpus_per_actor": 1.0, "data.cache": "off",
         "train.epochs": 3, "plan.data_cpus": 1.0}
# one actor busy 88% of the run: 22% of the max's 4 slots, but only 1 of them can exist
BUSY_ACTOR = [{"operator": "MapBatches(SampleReader)", "rows": 1434, "busy_s": 31.7,
               "blocked_s": 0.0, "tasks": 23, "wall_s": 36.0}]


def test_advice_never_raises_a_pool_max_the_plans_cpus_cannot_hold(make_ranks):
    d = run(make_ranks(2, data_wait=0.3), BUSY_ACTOR, context=PROBE)
    assert d.verdict == "input_bound"
    text = d.advice[0]
    assert ("the plan gives preprocessing 1 CPU(s), room for 1 actor(s) at `data.cpus_per_actor` "
            "1, so a larger `data.concurrency` max cannot help") in text
    # in order of expected gain: the cache (epochs decode again), more actors per CPU, nodes
    assert [c["key"] for c in d.changes] == ["data.cache", "data.cpus_per_actor"]
    assert d.changes[0]["value"] == "memory"
    assert d.changes[1]["value"] == 0.25  # the 4 actors of the max fit in the 1 CPU
    assert "add CPU nodes with 3 more CPU(s)" in text
    assert "data.concurrency" not in [c["key"] for c in d.changes]
    assert d.evidence["actors_that_fit"] == 1 and d.evidence["plan_data_cpus"] == 1.0
    assert d.evidence["data_busy_fraction"] == pytest.approx(31.7 / 36)  # not "spare capacity"


@pytest.mark.parametrize("cpu_share", [0.06, 0.97])
def test_waiting_actors_get_more_actors_per_cpu_and_computing_ones_more_cpus(make_ranks,
                                                                              cpu_share):
    # 6 ms of waiting a row against a decode of well under 1 ms: the actor used 6% of a CPU
    d = run(make_ranks(2, data_wait=0.3), BUSY_ACTOR,
            context={**PROBE, "pool.decode_cpu_share": cpu_share})
    keys = [c["key"] for c in d.changes]
    assert d.evidence["decode_cpu_share"] == cpu_share
    if cpu_share < 0.5:
        assert keys == ["data.cache", "data.cpus_per_actor"]
        assert "the actors used 6% of a CPU while decoding: they wait (I/O, sleeps)" in d.advice[0]
    else:
        assert keys == ["data.cache"]  # more actors on the same CPU would only share it
        assert "they compute, so only more CPUs (or decoding less) help" in d.advice[0]
        assert "add CPU nodes with 3 more CPU(s)" in d.advice[0]


def test_a_pool_at_its_max_and_its_cpus_gets_room_and_a_larger_max_together(make_ranks):
    context = {**PROBE, "data.concurrency": [1, 1], "data.cache": "memory"}
    d = run(make_ranks(2, data_wait=0.3), BUSY_ACTOR, context=context)
    keys = [(c["key"], c["value"]) for c in d.changes]
    target = keys[1][1][1]
    assert keys == [("data.cpus_per_actor", math.floor(100 / target) / 100),
                    ("data.concurrency", [1, target])]
    assert "data.cache" not in d.advice[0]  # cached already: nothing decodes twice
    # each alone changes nothing (measured: 1.02x and 0.95x): `pipeline tune` tries them as one
    assert {c["together"] for c in d.changes} == {"actors per CPU"}
    changes, _ = parse_changes(d.as_dict(), {})
    assert [c.key for c in next_changes(changes, context)] == ["data.cpus_per_actor",
                                                              "data.concurrency"]


def test_a_budget_with_room_grows_the_pool_only_as_far_as_it_holds(make_ranks):
    context = {**PROBE, "data.concurrency": [1, 2], "plan.data_cpus": 3.0}
    two_busy = [{**BUSY_ACTOR[0], "busy_s": 2 * 31.7}]
    d = run(make_ranks(2, data_wait=0.3), two_busy, context=context)
    assert d.changes[0]["key"] == "data.concurrency" and d.changes[0]["value"] == [1, 3]
    assert "raise `data.concurrency` max from 2 to 3" in d.advice[0]


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
    assert d.advice[0].startswith("communication-bound: exposed all-reduce took 44% of the "
                                  "training phase")
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
        "startup_bound": {r: combine_summaries(fake_worker.run([Epoch(startup=2.0)] * 3, rank=r)[0])
                          for r in range(2)},
        "inconclusive": make_ranks(2, other=0.1),
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
    assert "`transfer.host_prefetch` from 2 to 4" in d.advice[0]


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


# -- multi-epoch runs of the real worker loop, driven by fakes (fake_worker.py) ------------


def loop_ranks(plans_by_rank, *, peer=True):
    """``{rank: combined summary}`` for ranks running ``plans_by_rank[rank]`` (one Epoch per
    epoch); with ``peer`` every rank gets the slowest rank's waits, as the loop's collective."""
    epochs = len(next(iter(plans_by_rank.values())))
    peers = ([[max(w) for w in zip(*(p[e].step_waits() for p in plans_by_rank.values()),
                                   strict=True)] for e in range(epochs)] if peer else None)
    return {r: combine_summaries(fake_worker.run(plans, rank=r, peer_waits=peers)[0])
            for r, plans in plans_by_rank.items()}


def test_short_epochs_dominated_by_startup_are_startup_bound_and_advise_the_cache():
    # The quickstart's shape: every epoch waits ~2.3 s for Ray Data before its first batch.
    ranks = loop_ranks({r: [Epoch(startup=2.3, steps=20)] * 4 for r in range(2)})
    d = run(ranks, context={**CONTEXT, "data.cache": "off"})
    assert d.verdict == "startup_bound"
    assert "`data.cache: memory` (now off)" in d.advice[0]
    assert d.changes[0]["key"] == "data.cache" and d.changes[0]["value"] == "memory"
    assert d.evidence["startup_repeats"] is True
    assert d.evidence["costs"]["startup"] > 0.5
    assert d.evidence["explained_fraction"] > 0.95


def test_startup_behind_a_saturated_decode_pool_advises_the_cache_then_more_actors():
    # One slow decode actor, cache off: each epoch's first blocks wait for the full pool.
    ranks = loop_ranks({r: [Epoch(startup=2.3, steps=20)] * 4 for r in range(2)})
    wall = ranks[0]["training"]["wall_s"]
    ops = [{"operator": "MapBatches(SampleReader)", "rows": 1434, "busy_s": 0.99 * 2 * wall,
            "blocked_s": 0.0, "tasks": 24, "wall_s": wall}]
    d = run(ranks, ops, context={**CONTEXT, "data.cache": "off"})
    assert d.verdict == "startup_bound"
    # the cache removes the repeated start-up and decoding; more actors speed up what decodes
    assert [c["key"] for c in d.changes] == ["data.cache", "data.concurrency"]
    assert d.changes[1]["value"] == [1, 4]
    assert "then raise `data.concurrency` to [1, 4]" in d.advice[0]


def test_first_epoch_startup_behind_a_saturated_pool_advises_more_actors():
    # Cache on, one slow decode actor: only the decoding epoch waits, for a pool that is full.
    plans = [Epoch(startup=6.0, steps=20)] + [Epoch(startup=0.01, steps=20)] * 2
    ranks = loop_ranks({r: plans for r in range(2)})
    # busy 97% of its two slots over its own wall (the decoding epoch), not the training wall
    ops = [{"operator": "MapBatches(SampleReader)", "rows": 1434, "busy_s": 0.97 * 8.0 * 2,
            "blocked_s": 0.0, "tasks": 6, "wall_s": 8.0}]
    d = run(ranks, ops, context={**CONTEXT, "data.cache": "memory"})
    assert d.verdict == "startup_bound" and d.evidence["startup_repeats"] is False
    assert [c["key"] for c in d.changes] == ["data.concurrency"]
    assert d.changes[0]["value"] == [1, 4]
    assert "raise `data.concurrency` to [1, 4]; beyond that" in d.advice[0]


def test_startup_paid_by_the_first_epoch_only_advises_longer_runs_without_a_change():
    plans = [Epoch(startup=6.0, steps=20)] + [Epoch(startup=0.01, steps=20)] * 2
    d = run(loop_ranks({r: plans for r in range(2)}),
            context={**CONTEXT, "data.cache": "memory"})
    assert d.verdict == "startup_bound"
    assert d.evidence["startup_repeats"] is False
    assert "more epochs per job" in d.advice[0]
    assert d.changes == ()


def test_a_dominant_unexplained_phase_is_inconclusive_and_says_where_it_sits():
    # Rank 1 does something between its optimizer step and the next fetch (a host sync, a
    # logger) in epochs 2 and 3: the named phases cannot explain that time.
    calm, busy = Epoch(steps=20), Epoch(steps=20, other=0.15)
    ranks = loop_ranks({0: [calm, calm, calm], 1: [calm, busy, busy]})
    d = run(ranks)
    assert d.verdict == "inconclusive"
    ev = d.evidence
    assert ev["reason"] == "unexplained" and ev["unexplained_phase"] == "other"
    assert ev["explained_fraction"] < CONFIG.min_explained_fraction
    assert ev["unexplained_by_rank"]["1"] > ev["unexplained_by_rank"]["0"]
    assert set(sorted(ev["unexplained_by_epoch"], key=ev["unexplained_by_epoch"].get)[-2:]) \
        == {"2", "3"}
    assert "explain only" in d.advice[0] and "`other`" in d.advice[0]
    assert "rank 1" in d.advice[0] and "epochs 2" in d.advice[0] or "epochs 3" in d.advice[0]
    assert d.changes == ()
    # The same numbers with a lower bar give a verdict: the bar is the config's.
    assert run(ranks, config=ProfileConfig(min_explained_fraction=0.3)).verdict != "inconclusive"


def test_time_between_epochs_that_no_phase_covers_is_untracked_and_inconclusive():
    ranks = loop_ranks({r: [Epoch(steps=20, between=3.0)] * 3 for r in range(2)})
    d = run(ranks)
    assert d.verdict == "inconclusive"
    assert d.evidence["unexplained_phase"] == "untracked"
    assert "between epochs" in d.advice[0]


def test_compute_is_no_fallback_when_something_else_is_larger():
    # Validation takes most of the time and nothing waits: compute is not the answer.
    ranks = loop_ranks({r: [Epoch(steps=10, validation=5.0, startup=0.01)] * 3
                        for r in range(2)})
    d = run(ranks)
    assert d.verdict == "inconclusive"
    assert d.evidence["reason"] == "no_dominant_cost"
    assert d.evidence["largest_cost"] == "validation"
    assert "validation" in d.advice[0]


def test_ranks_waiting_for_a_shared_slow_stream_in_turns_are_input_bound_on_every_epoch():
    # One preprocessing actor feeds two ranks: they get batches in turns, and each waits for
    # the other inside the all-reduce. Averaged naively this read as half communication.
    n = 21
    turns = {r: [0.0] + [0.25 if i % 2 == r else 0.0 for i in range(1, n)] for r in range(2)}
    plans = {r: [Epoch(steps=n, startup=0.3, waits=turns[r],
                       comms=[0.003 + (0.25 - w if i else 0.0) for i, w in enumerate(turns[r])])
                 ] * 3 for r in range(2)}
    d = run(loop_ranks(plans), context={**CONTEXT, "data.concurrency": [1, 1]})
    assert d.verdict == "input_bound", d.advice
    assert "communication_bound" not in d.evidence.get("also", [])
    assert d.evidence["costs"]["communication"] < 0.05
    # the pool must grow by 1/(1 - step wait share), at most ×4 per try: ×4 here
    more = d.changes[0]  # no preprocessing stats: more actors first, then deeper prefetch
    assert more["key"] == "data.concurrency" and more["value"][0] == 1
    assert more["value"][1] == math.ceil(min(4, 1 / (1 - d.evidence["input_step_fraction"])))
    assert more["value"][1] == 4
    naive = run(loop_ranks(plans, peer=False), context={**CONTEXT, "data.concurrency": [1, 1]})
    assert naive.evidence["costs"]["communication"] > 0.25  # what the correction removes


def test_every_change_is_a_valid_override_of_the_quickstart():
    cases = [
        make_ranks_for("input_bound"), make_ranks_for("transfer_bound"),
        make_ranks_for("communication_bound"), make_ranks_for("straggler"),
        make_ranks_for("compute_bound"),
        loop_ranks({r: [Epoch(startup=2.3, steps=20)] * 3 for r in range(2)}),
    ]
    context = context_from_config(load_config(QUICKSTART), device="cpu")
    seen = set()
    for ranks in cases:
        d = run(ranks, context=context)
        assert d.changes, d.verdict
        seen.add(d.verdict)
        for c in d.changes:
            assert set(c) == {"key", "value", "why"} and c["why"]
            config = load_config(QUICKSTART, [f"{c['key']}={json.dumps(c['value'])}"])
            section, name = c["key"].split(".")
            value = getattr(getattr(config, section), name)
            assert (list(value) if isinstance(value, tuple) else value) == c["value"]
            assert c["value"] != context.get(c["key"])  # a change, not the current value
            assert f"`{c['key']}" in " ".join(d.advice)  # the key the advice names
    assert seen == {"input_bound", "transfer_bound", "communication_bound", "straggler",
                    "compute_bound", "startup_bound"}


def make_ranks_for(verdict):
    from conftest import BALANCED

    per_step = {"input_bound": {"data_wait": 0.2}, "transfer_bound": {"h2d": 0.2},
                "communication_bound": {"comm_exposed": 0.2}, "compute_bound": {},
                "straggler": {}}[verdict]
    slow = {1: {"forward": 0.3}} if verdict == "straggler" else {}
    return {r: rank_summary(r, {**BALANCED, **per_step, **slow.get(r, {})}) for r in range(2)}


def test_summary_and_verdict_use_one_straggler_rule_at_the_boundary():
    for slow, expected in ((1.25, False), (1.2501, True)):
        ranks = {0: rank_summary(0, {"forward": 1.0}), 1: rank_summary(1, {"forward": slow})}
        merged = merge_ranks(ranks)
        work = {int(r): row["work_s"] for r, row in merged["per_rank"].items()}
        summary = straggler_summary(work, straggler_ratio=CONFIG.straggler_ratio)
        assert summary["straggler"] is expected
        assert (run(ranks).verdict == "straggler") is expected
        assert summary["slowest_rank"] == 1 and summary["imbalance"] == pytest.approx(slow)


def test_a_straggler_that_costs_little_is_noted_not_the_verdict():
    # Rank 1 is 30% slower, but at 4 ms steps: the others wait for it 1% of a run that spends
    # most of its time starting up. The rule still names it (as summary.json does).
    step = {"steps": 20, "data_wait": 0.0, "backward": 0.001, "optimizer": 0.001, "startup": 3.0}
    fast, slow = Epoch(forward=0.002, **step), Epoch(forward=0.0032, **step)
    d = run(loop_ranks({0: [fast] * 3, 1: [slow] * 3}), context={**CONTEXT, "data.cache": "off"})
    assert d.verdict == "startup_bound"
    assert "straggler" in d.evidence["also"]
    assert any(a.startswith("also: straggler: rank 1") for a in d.advice)


def test_a_start_up_that_repeats_at_a_third_of_the_first_still_advises_the_cache():
    # The quickstart with the cache off: 5 s before epoch 1's first batch (actors start), then
    # 1.6 s every epoch after it (the pipeline restarts): together more than the first.
    plans = [Epoch(startup=5.0, steps=22)] + [Epoch(startup=1.6, steps=22)] * 5
    d = run(loop_ranks({r: plans for r in range(2)}), context={**CONTEXT, "data.cache": False})
    assert d.verdict == "startup_bound"
    assert d.evidence["startup_repeats"] is True
    assert [c["value"] for c in d.changes] == ["memory"]
    assert "(now off)" in d.advice[0]  # YAML's bare `off` arrives as false
