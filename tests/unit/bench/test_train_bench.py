"""The training-job benchmark's pure parts: commands from the YAML, rotation, result parsing,
ratios, the report, the CLI flags, and the baselines' copies of Feedline's model."""

import argparse
import importlib.util
import json
from pathlib import Path

import pytest
import torch

from pipeline.bench import train as bench
from pipeline.bench.train_report import to_markdown
from pipeline.cli import bench_train
from pipeline.train.models import small_cnn

ROOT = Path(__file__).resolve().parents[3]


def _flag(argv, name, count=1):
    i = argv.index(name)
    return argv[i + 1:i + 1 + count]


def test_baselines_get_the_yaml_numbers_and_feedline_the_same_overrides(tmp_path):
    cfg = bench.TrainBenchConfig(epochs=7, cpus=2, image_size=(16, 16))
    job = bench.load_job(cfg, tmp_path)
    assert (job.epochs, job.batch_size, job.workers, job.cpus_per_worker, job.image_size) == (
        7, 64, 2, 0.5, (16, 16))
    assert job.loader_workers == 1  # 2 cores, 2 ranks
    feedline = bench.command("feedline", cfg, job, tmp_path / "f")
    assert feedline[1:4] == ["-m", "pipeline", "run"]
    sets = [feedline[i + 1] for i, a in enumerate(feedline) if a == "--set"]
    assert sets == [f"data.source.path={tmp_path}", "train.epochs=7", "run.num_cpus=2",
                    "data.image_size=[16, 16]"]
    ray_argv = bench.command("raytrain", cfg, job, tmp_path / "r")
    ddp_argv = bench.command("ddp", cfg, job, tmp_path / "d")
    for argv in (ray_argv, ddp_argv):
        assert _flag(argv, "--epochs") == ["7"] and _flag(argv, "--batch-size") == ["64"]
        assert _flag(argv, "--image-size", 2) == ["16", "16"]
        assert _flag(argv, "--mean", 3) == ["0.485", "0.456", "0.406"]
        assert _flag(argv, "--lr") == ["0.01"] and _flag(argv, "--workers") == ["2"]
    assert _flag(ray_argv, "--num-cpus") == ["2"]
    assert _flag(ray_argv, "--cpus-per-worker") == ["0.5"]
    with pytest.raises(ValueError, match="unknown contender"):
        bench.command("tf", cfg, job, tmp_path)


def test_rotation_puts_every_contender_first_once():
    names = bench.CONTENDERS
    firsts = [bench.rotation(names, r)[0] for r in range(3)]
    assert sorted(firsts) == sorted(names)
    assert all(sorted(bench.rotation(names, r)) == sorted(names) for r in range(5))


def test_results_are_parsed_from_the_last_marker_line_and_feedline_summary(tmp_path):
    log = "noise\nBENCH_RESULT {\"train_loss\": 9}\nmore\nBENCH_RESULT {\"train_loss\": 1.5}\n"
    assert bench.parse_result(log) == {"train_loss": 1.5}
    assert bench.parse_result("no marker") is None
    assert bench.feedline_result(tmp_path) is None
    (tmp_path / "summary.json").write_text(json.dumps({
        "train_loss": 2.0, "samples": 96, "wall_seconds": 40.0, "samples_per_second": 2.4,
        "breakdown": [{"phase": "ray start", "seconds": 7.5, "share": 0.2},
                      {"phase": "epoch 1", "seconds": 3.0}]}))
    got = bench.feedline_result(tmp_path)
    assert (got["train_loss"], got["samples"], got["own"]["wall_seconds"]) == (2.0, 96, 40.0)
    assert got["breakdown"] == {"breakdown.ray start": 7.5, "breakdown.epoch 1": 3.0}


def _run(name, round_index, wall, ok=True):
    return {"contender": name, "round": round_index, "position": 0, "ok": ok, "rc": 0 if ok else 1,
            "wall_s": wall, "train_loss": 2.0 if ok else None, "samples": 100, "marks": {},
            "feedline": {"own": {}, "breakdown": {}} if name == "feedline" else None,
            "log": f"{name}.log", "log_tail": ""}


def test_ratios_are_baseline_seconds_over_feedline_seconds_and_failures_are_shown():
    runs = [_run("feedline", 0, 10.0), _run("raytrain", 0, 30.0), _run("ddp", 0, 4.0),
            _run("feedline", 1, 20.0), _run("raytrain", 1, 30.0), _run("ddp", 1, 5.0, ok=False)]
    result = bench.summarise(runs, bench.CONTENDERS, epochs=3)
    assert result["contenders"]["feedline"]["wall_s"] == {"median": 15.0, "min": 10.0,
                                                          "max": 20.0}
    assert result["contenders"]["ddp"]["failed"] == 1
    assert result["ratios"]["raytrain"]["ratio"] == pytest.approx(2.0)
    assert result["ratios"]["raytrain"]["per_round"] == {"median": 2.25, "min": 1.5, "max": 3.0}
    assert result["ratios"]["ddp"]["ratio"] == pytest.approx(4.0 / 15.0)
    assert [t["met"] for t in result["targets"]] == [True, False]
    ten = bench.summarise(runs, bench.CONTENDERS, epochs=10)
    assert "0.8x" in ten["targets"][1]["target"]
    result |= {"job": {"epochs": 3, "image_size": (128, 128), "batch_size": 64, "workers": 2,
                       "cpus": 2},
               "config": {"samples": 100, "source_size": (256, 256), "rounds": 2},
               "machine": {"nproc": 2, "cpu": "x", "python": "3", "ray": "2", "torch": "2",
                           "loadavg": [0.1, 0, 0]},
               "loadavg_after": [0.2, 0, 0], "runs": runs, "commands": {"ddp": ["python"]}}
    report = to_markdown(result)
    assert "2.00x (per round 1.50-3.00x)" in report and "MISSED" in report
    assert "round 2 ddp: exit 1" in report
    bench_train.tables(result)  # the console tables build from the same result


def test_cli_flags_select_the_config():
    parser = argparse.ArgumentParser()
    bench_train.configure(parser)
    quick = bench_train.bench_config(parser.parse_args(["--quick", "--cpus", "1"]))
    assert (quick.samples, quick.epochs, quick.rounds, quick.cpus) == (64, 1, 1, 1)
    full = bench_train.bench_config(parser.parse_args(["--epochs", "10"]))
    assert (full.samples, full.epochs, full.rounds, full.source_size) == (2048, 10, 3, (256, 256))
    assert full.image_size is None  # the YAML's 128x128
    with pytest.raises(ValueError, match="--rounds"):
        bench_train.bench_config(parser.parse_args(["--rounds", "0"]))


@pytest.mark.parametrize("script", ["train_ddp.py", "train_raytrain.py"])
def test_baselines_train_a_copy_of_feedlines_cnn(script):
    spec = importlib.util.spec_from_file_location(script[:-3], ROOT / "benchmarks" / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kwargs = {"input_shape": (3, 128, 128), "num_classes": 10}
    torch.manual_seed(0)
    theirs = module.small_cnn(**kwargs)
    torch.manual_seed(0)
    ours = small_cnn(**kwargs)
    assert repr(theirs) == repr(ours)
    for (name, a), (_, b) in zip(theirs.state_dict().items(), ours.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
