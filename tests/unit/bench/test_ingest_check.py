"""The ingest benchmark's physical check: impossible results are INVALID, possible ones pass,
and an INVALID contender gets no ratio anywhere in the report. Pure numbers, no Ray."""

import pytest

from pipeline.bench import ingest_summary
from pipeline.bench.ingest import rotated
from pipeline.bench.ingest_check import RunFigures, check_contender, check_runs
from pipeline.bench.ingest_report import to_markdown


def runs(*rates, cpu_ms=2.0):
    return [RunFigures(rep=i, samples_per_s=r, cpu_s_per_sample=cpu_ms / 1e3)
            for i, r in enumerate(rates)]


CEILING = runs(900, 950, 1000, cpu_ms=2.0)


def test_the_issue_s_own_result_needs_more_cores_than_the_machine_has():
    # issue 13: 1,757 samples/s x 2.46 CPU ms/sample on a 2-core machine
    verdict = check_runs(runs(1757, cpu_ms=2.46), label="1 epoch", cores=2)
    assert not verdict.valid
    assert "= 4.32 cores (limit 2.10 on 2)" in verdict.reasons[0]


def test_a_result_that_fits_the_machine_and_the_ceiling_passes():
    assert check_runs(runs(600, 650, 700, cpu_ms=2.8), label="3 epochs", cores=2,
                      ceiling=CEILING).valid
    # 5% over the core count is measurement slack, not a violation
    assert check_runs(runs(1000, cpu_ms=2.1), label="1 epoch", cores=2).valid


def test_one_impossible_repetition_is_enough():
    verdict = check_runs(runs(600, 1400, 600, cpu_ms=2.0), label="1 epoch", cores=2)
    assert len(verdict.reasons) == 1 and "1 of 3 runs (rep 1)" in verdict.reasons[0]


def test_beating_the_ceiling_by_more_than_noise_is_invalid():
    verdict = check_runs(runs(1300, cpu_ms=1.5), label="1 epoch", cores=2, ceiling=CEILING)
    assert not verdict.valid and "beats the ceiling" in verdict.reasons[0]
    # within 10% of the ceiling's median: noise
    assert check_runs(runs(1040, cpu_ms=1.9), label="1 epoch", cores=2,
                      ceiling=CEILING).valid
    # a noisy ceiling (min-max 40% of its median) widens the tolerance
    noisy = runs(700, 950, 1080, cpu_ms=1.9)
    assert check_runs(runs(1250, cpu_ms=1.6), label="1 epoch", cores=2, ceiling=noisy).valid


def test_cpu_below_the_decode_s_own_means_processes_were_not_measured():
    # the driver alone: 0.3 ms/sample where decoding costs 2 ms
    verdict = check_runs(runs(800, cpu_ms=0.3), label="1 epoch", cores=2, ceiling=CEILING)
    assert not verdict.valid and "not measured" in verdict.reasons[0]


def test_invisible_ray_workers_make_the_check_impossible_so_the_result_is_invalid():
    verdict = check_runs(runs(500), label="1 epoch", cores=2, cpu_visible=False)
    assert not verdict.valid and "RAY_ADDRESS" in verdict.reasons[0]


def test_a_cache_is_bounded_by_the_ceiling_only_where_it_decodes():
    cached = {1: runs(800, cpu_ms=2.2), 3: runs(1900, cpu_ms=0.9)}
    ceiling = {1: CEILING, 3: CEILING}
    assert check_contender(cached, cores=2, ceiling=ceiling, same_work_epochs=[1]).valid
    verdict = check_contender(cached, cores=2, ceiling=ceiling)
    assert [r.split(":")[0] for r in verdict.reasons] == ["3 epochs", "3 epochs"]
    # the core rule still applies to every kind of run
    impossible = {1: runs(800, cpu_ms=2.2), 3: runs(1900, cpu_ms=2.0)}
    assert not check_contender(impossible, cores=2, ceiling=ceiling, same_work_epochs=[1]).valid


def test_bad_inputs_are_errors_not_verdicts():
    with pytest.raises(ValueError, match="no runs"):
        check_runs([], label="1 epoch", cores=2)
    with pytest.raises(ValueError, match="cores"):
        check_runs(runs(1), label="1 epoch", cores=0)


def _record(name, rep, epochs, sps, cpu_ms, added=100.0):
    return {"contender": name, "rep": rep, "epochs": epochs, "e2e_sps": sps,
            "steady_sps": sps * 1.1, "ttfb_s": 1.0, "ttfb_later_s": 0.5 if epochs > 1 else None,
            "cpu_ms_per_sample": cpu_ms, "cores_used": sps * cpu_ms / 1e3, "added_mb": added,
            "cpu_visible": True, "decided": None}


def _result(feedline_sps):
    names = ["feedline", "ray_data_tuned", "dataloader_tuned", "ceiling"]
    figures = {"feedline": (feedline_sps, 2.4), "ray_data_tuned": (500, 2.6),
               "dataloader_tuned": (700, 2.2), "ceiling": (900, 2.0)}
    runs_ = [_record(n, rep, e, *figures[n]) for rep in range(3) for n in names
             for e in (1, 3)]
    summary = ingest_summary.summarize_runs(runs_, names)
    verdicts = ingest_summary.verdicts(runs_, names, cores=2)
    ratios = ingest_summary.ratios(summary, verdicts)
    return {
        "summary": summary, "verdicts": verdicts, "ratios": ratios,
        "targets": ingest_summary.targets(summary, ratios), "runs": runs_,
        "workload": {"samples": 64, "workers": 2, "prefetch": 4, "rows_per_block": 256,
                     "batch_size": 64, "cores": 2, "output": "uint8 3x128x128"},
        "config": {"source_size": [256, 256], "reps": 3, "epochs": [1, 3]},
        "machine": {"nproc": 2, "cpu_model": "x", "ram_gib": 1, "platform": "p",
                    "python": "3.11", "versions": {"ray": "2.60.0"}, "ray_cluster_cpus": 2,
                    "date": "d", "load_average": None, "load_average_before": None},
        "ray_started_by_benchmark": True, "idle": {"pss_mb": 1234.0, "cores": 0.1},
    }


def test_an_invalid_feedline_gets_no_ratio_and_reads_invalid_in_the_report():
    good = _result(feedline_sps=600)
    assert good["verdicts"]["feedline"] == {"valid": True, "reasons": []}
    assert good["ratios"]["feedline"]["ray_data_tuned"]["e2e_3"] == pytest.approx(1.2)
    assert {t["target"]: t["met"] for t in good["targets"]}[
        "3 epochs: >= 1.2x raw Ray Data tuned, end to end"] is True

    bad = _result(feedline_sps=1500)  # 1,500 x 2.4 ms = 3.6 cores on 2, and > the ceiling
    assert not bad["verdicts"]["feedline"]["valid"]
    assert set(bad["ratios"]["feedline"].values()) == {"INVALID"}
    assert all(t["invalid"] and t["value"] is None for t in bad["targets"])
    report = to_markdown(bad)
    feedline_row = next(line for line in report.splitlines() if line.startswith("| Feedline |"))
    assert "1,500" not in feedline_row and feedline_row.count("**INVALID**") == 3
    assert "3 of 3 runs" in report and "= 3.60 cores" in report
    assert "beats the ceiling" in report
    assert "1.5x" not in report.split("## Feedline")[1].split("## Targets")[0]
    assert "1,234 MiB PSS" in report  # the idle baseline, printed once
    assert report.count("1,234") == 1


def test_every_contender_takes_every_slot_once_in_as_many_repetitions():
    names = ["a", "b", "c"]
    orders = [rotated(names, rep) for rep in range(4)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    for slot in range(3):
        assert sorted(order[slot] for order in orders[:3]) == names
