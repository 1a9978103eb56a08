"""The run-directory outputs: timeline.json, breakdown.png, report.md, profile.json, and
`pipeline report RUN_DIR` regenerating them."""

import argparse
import json

import numpy as np
import pytest
import torch
from matplotlib import image

from pipeline.cli import report as report_cli
from pipeline.profile import (
    ProfileConfig,
    StepProfiler,
    combine_summaries,
    diagnose,
    load_profile,
    merge_ranks,
    plot_breakdown,
    save_profile,
    summary_fields,
    write_report,
    write_timeline,
)
from pipeline.profile._summary import TRAINING_PHASES
from tests.unit.train import fake_worker
from tests.unit.train.fake_worker import Epoch, VirtualClock

DATA_OPS = [{"operator": "ReadParquet", "rows": 640, "busy_s": 0.4, "blocked_s": 0.1,
             "tasks": 4, "wall_s": 10.0},
            {"operator": "MapBatches(decode)", "rows": 640, "busy_s": 19.4, "blocked_s": None,
             "tasks": 20, "wall_s": 10.0}]
THROUGHPUT = [{"time_s": float(t), "samples_per_s": 100.0 + 10 * t, "rank": r}
              for r in (0, 1) for t in range(6)]


def profiled_ranks(n=2, steps=4):
    out = {}
    for rank in range(n):
        clock = VirtualClock()
        prof = StepProfiler(rank=rank, device=torch.device("cpu"), trace_steps=3, clock=clock)
        for _ in range(steps):
            with prof.span("data_wait"):
                clock.advance(0.001)
            with prof.span("forward"):
                clock.advance(0.001)
            with prof.span("backward"):
                clock.advance(0.001)
            prof.step_done(samples=4)
        out[rank] = (prof.epoch_summary(), prof.trace_events())
    return out


def test_timeline_is_valid_trace_json_with_every_rank(tmp_path):
    ranks = profiled_ranks(3)
    path = write_timeline(tmp_path / "timeline.json", {r: ev for r, (_, ev) in ranks.items()},
                          DATA_OPS)
    trace = json.loads(path.read_text())
    events = trace["traceEvents"]
    for e in events:
        assert {"ph", "ts", "pid", "tid"} <= set(e)
    spans = [e for e in events if e["ph"] == "X"]
    assert {e["pid"] for e in spans} == {0, 1, 2, 3}  # three ranks + preprocessing
    assert min(e["ts"] for e in spans) == 0  # rebased
    names = {(e["pid"], e["args"]["name"]) for e in events if e["name"] == "process_name"}
    assert names == {(0, "rank 0"), (1, "rank 1"), (2, "rank 2"),
                     (3, "preprocessing (Ray Data)")}
    threads = {e["args"]["name"] for e in events if e["name"] == "thread_name" and e["pid"] == 1}
    assert {"data_wait", "forward", "backward", "comm_exposed"} <= threads
    ops = [e for e in spans if e["pid"] == 3]
    assert [e["name"] for e in ops] == ["ReadParquet", "MapBatches(decode)"]
    assert ops[1]["args"]["busy_s"] == 19.4


def synthetic_merged(make_ranks, **per_step):
    return merge_ranks(make_ranks(2, **per_step))


def test_breakdown_png_is_a_real_picture(tmp_path, make_ranks):
    path = plot_breakdown(tmp_path / "breakdown.png",
                          synthetic_merged(make_ranks, data_wait=0.1), THROUGHPUT)
    assert path.stat().st_size > 20_000
    pixels = image.imread(path)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 600
    colours = np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)
    assert len(colours) > 50  # bars, lines and text, not a blank canvas
    # The data_wait red of the stacked bars is in there.
    red = np.array([0xd6, 0x27, 0x28]) / 255
    assert (np.abs(pixels[..., :3] - red).max(axis=-1) < 0.02).sum() > 500


def test_breakdown_png_without_throughput_still_draws_the_bars(tmp_path, make_ranks):
    path = plot_breakdown(tmp_path / "b.png", synthetic_merged(make_ranks), [])
    assert path.stat().st_size > 10_000


def test_report_md_has_verdict_evidence_and_advice(tmp_path, make_ranks):
    merged = synthetic_merged(make_ranks, data_wait=0.104)
    d = diagnose(merged, DATA_OPS, ProfileConfig(), {"data.concurrency": [1, 2]})
    text = write_report(tmp_path / "report.md", d, merged).read_text()
    assert text.startswith("# Profile: input_bound")
    assert "raise `data.concurrency` max from 2 to 4" in text
    assert "| data_wait | 104.00 | 40.9% |" in text
    assert "MapBatches(decode)" in text


def test_profile_json_round_trip_and_summary_fields(tmp_path, make_ranks):
    ranks = make_ranks(2)
    merged = merge_ranks(ranks)
    d = diagnose(merged, [], ProfileConfig(), {})
    save_profile(tmp_path, ranks=ranks, merged=merged, data_ops=DATA_OPS,
                 throughput=THROUGHPUT, context={"train.num_workers": 2},
                 events={0: [{"ph": "X", "ts": 1, "pid": 0, "tid": 1}]}, diagnosis=d)
    saved = load_profile(tmp_path)
    assert saved.ranks == ranks and saved.merged == merged
    assert list(saved.events) == [0] and saved.diagnosis["verdict"] == "compute_bound"
    fields = summary_fields(merged, d)
    assert set(fields) == {"data_wait_fraction", "comm_exposed_fraction", "step_breakdown",
                           "training_wall_s", "time_breakdown", "explained_fraction",
                           "diagnosis"}
    assert sum(fields["time_breakdown"].values()) == pytest.approx(1.0)
    json.dumps(fields)


def test_load_profile_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="profile.enabled"):
        load_profile(tmp_path)
    (tmp_path / "profile.json").write_text('{"ranks": {}')
    with pytest.raises(ValueError, match="not valid JSON"):
        load_profile(tmp_path)
    (tmp_path / "profile.json").write_text('{"version": 1, "ranks": {}}')
    with pytest.raises(ValueError, match="missing merged"):
        load_profile(tmp_path)


def run_cli(run_dir):
    parser = argparse.ArgumentParser()
    report_cli.configure(parser)
    return report_cli.main(parser.parse_args([str(run_dir)]))


def test_pipeline_report_rediagnoses_with_the_saved_config(tmp_path, make_ranks, capsys):
    ranks = make_ranks(2, data_wait=0.104)
    save_profile(tmp_path, ranks=ranks, merged=merge_ranks(ranks), data_ops=DATA_OPS,
                 throughput=THROUGHPUT, context={"data.concurrency": [1, 2]})
    assert run_cli(tmp_path) == 0
    assert "input_bound" in capsys.readouterr().out
    assert (tmp_path / "report.md").read_text().startswith("# Profile: input_bound")
    assert (tmp_path / "breakdown.png").stat().st_size > 20_000
    # The run's config raises the threshold: the same numbers are no longer input-bound.
    (tmp_path / "config.yaml").write_text("profile:\n  input_bound_fraction: 0.5\n")
    assert run_cli(tmp_path) == 0
    assert "compute_bound" in capsys.readouterr().out
    assert (tmp_path / "report.md").read_text().startswith("# Profile: compute_bound")


def test_pipeline_report_keeps_the_jobs_wall_time_or_says_why_not(tmp_path, make_ranks,
                                                                  capsys):
    ranks = make_ranks(2, data_wait=0.104)
    save_profile(tmp_path, ranks=ranks, merged=merge_ranks(ranks), data_ops=DATA_OPS,
                 throughput=THROUGHPUT, context={})
    rows = [{"phase": "imports and config", "seconds": 2.0, "share": 0.25},
            {"phase": "epoch 1 steady training", "seconds": 6.0, "share": 0.75}]
    text = json.dumps({"status": "succeeded", "breakdown": rows}, indent=2)
    (tmp_path / "summary.json").write_text(text)
    assert run_cli(tmp_path) == 0
    report = (tmp_path / "report.md").read_text()
    assert "## Where the job's wall time went" in report and "| **total** | **8.00** |" in report
    assert "warning" not in capsys.readouterr().out
    # cut short (a crash while a copy was written): the report says what it cannot show
    (tmp_path / "summary.json").write_text(text[:len(text) // 2])
    assert run_cli(tmp_path) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"warning: {tmp_path / 'summary.json'} unreadable (JSONDecodeError" in out
    assert "report.md has no section on the job's wall time" in out
    assert "## Where the job's wall time went" not in (tmp_path / "report.md").read_text()


def test_pipeline_report_on_a_directory_without_a_profile_fails_clearly(tmp_path, capsys):
    assert run_cli(tmp_path) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich wraps to the terminal width
    assert "no profile in this run directory" in out


def test_report_shows_every_phase_of_the_training_wall_and_they_add_up(tmp_path):
    plans = [Epoch(startup=2.0, steps=20, validation=0.4, checkpoint=0.3)] * 3
    ranks = {r: combine_summaries(fake_worker.run(plans, rank=r)[0]) for r in range(2)}
    merged = merge_ranks(ranks)
    d = diagnose(merged, [], ProfileConfig(), {"data.cache": "off"})
    text = write_report(tmp_path / "report.md", d, merged).read_text()
    assert text.startswith("# Profile: startup_bound")
    assert "- `data.cache=memory`:" in text  # the change, as `--set` takes it
    table = text.split("## Where the training time went")[1].split("\n\n")[2]
    rows = {line.split(" | ")[0].strip("| *"): line.split(" | ")
            for line in table.splitlines()[2:]}
    assert set(rows) == {*TRAINING_PHASES, "total"}
    seconds = {p: float(rows[p][1]) for p in TRAINING_PHASES}
    wall = sum(plan.seconds() for plan in plans)
    assert sum(seconds.values()) == pytest.approx(wall, abs=0.01 * len(seconds))
    assert seconds["startup"] == pytest.approx(6.0) and seconds["checkpoint"] == pytest.approx(0.9)
    assert float(rows["startup"][2].rstrip("%")) == pytest.approx(100 * 6.0 / wall, abs=0.1)
    assert "| epoch | wall s | startup |" in text


def test_the_reports_pool_section_says_whether_decode_actors_waited_or_computed(tmp_path):
    ranks = {r: combine_summaries(fake_worker.run([Epoch()] * 2, rank=r)[0]) for r in range(2)}
    merged = merge_ranks(ranks)
    d = diagnose(merged, [], ProfileConfig(), {})
    held = {"type": "pool", "elapsed_s": 12.0, "action": "grow", "size_before": 1,
            "size_after": 4, "wait_before": 0.7, "busy_before": 0.88, "held_by_cpus": 1,
            "reason": "1 actor(s) deliver 4% of the demand; but the 1 CPU(s) it can have hold "
                      "only 1 actor(s) at data.cpus_per_actor 1 (the diagnosis says what can "
                      "work)"}
    pool = {"enabled": True, "range": [1, 4], "final_size": 4, "max_size": 4,
            "decisions": [held], "decode_cpu_share": 0.06,
            "epochs": [{"epoch": 1, "size": 4, "wait": 0.312, "work_s": 20.5, "train_s": 9.0}]}
    text = write_report(tmp_path / "report.md", d, merged, pool).read_text()
    assert "| 1 | 4 | 31.2% | 20.5 | 9.0 |" in text  # every epoch's totals
    assert ("The decode actors used 6% of a CPU while decoding: they mostly waited (I/O, "
            "sleeps), so more actors per CPU") in text
    assert "hold only 1 actor(s) at data.cpus_per_actor 1" in text  # the decision's reason


def test_timeline_has_a_track_for_each_out_of_step_phase(tmp_path):
    events = {r: fake_worker.run([Epoch()] * 2, rank=r)[1].trace_events() for r in range(2)}
    trace = json.loads(write_timeline(tmp_path / "t.json", events, []).read_text())
    threads = {e["args"]["name"] for e in trace["traceEvents"]
               if e["name"] == "thread_name" and e["pid"] == 0}
    assert {"startup", "validation", "report", "checkpoint"} <= threads
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans if e["cat"] == "epoch"} >= {"startup", "validation"}
