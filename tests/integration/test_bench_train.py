"""The training-job benchmark at tiny size: every contender (``pipeline run``, the hand-written
Ray Train script, plain DDP) runs as its own process with its own local Ray where it uses one,
exits 0, trains every image once, and starts from the same model: one step over the same 64
images from the same seed gives all three the same loss. No timing asserts."""

import json
import math

import pytest
from rich.console import Console

from pipeline.bench.train import CONTENDERS, TrainBenchConfig, run_train_bench
from pipeline.bench.train_report import to_markdown
from pipeline.cli.bench_train import tables


@pytest.mark.timeout(1200)  # three jobs that each start Python, torch and (two of them) Ray
def test_every_contender_finishes_the_same_training(tmp_path):
    config = TrainBenchConfig(samples=64, source_size=(32, 32), image_size=(16, 16), classes=4,
                              epochs=1, rounds=1, cpus=2, cache_dir=str(tmp_path / "cache"),
                              work_dir=str(tmp_path / "work"), timeout_s=600)
    result = run_train_bench(config)

    runs = result["runs"]
    assert [r["contender"] for r in runs] == list(CONTENDERS)
    for run in runs:
        assert run["rc"] == 0 and run["ok"], (run["contender"], run["log_tail"])
        assert run["wall_s"] > 0
        assert run["samples"] == 64, run  # one epoch over every image, nothing more
        assert math.isfinite(run["train_loss"]) and run["train_loss"] > 0
    losses = [r["train_loss"] for r in runs]
    assert max(losses) - min(losses) < 1e-3, losses  # same model, init, decode and normalisation
    feedline = next(r for r in runs if r["contender"] == "feedline")["feedline"]
    assert feedline["own"]["wall_seconds"] > 0
    for name in ("raytrain", "ddp"):
        marks = next(r for r in runs if r["contender"] == name)["marks"]
        assert 0 < marks["first_step"] <= marks["exit"], marks

    assert set(result["contenders"]) == set(CONTENDERS)
    assert set(result["ratios"]) == {"raytrain", "ddp"}
    for summary in result["contenders"].values():
        assert summary["failed"] == 0 and summary["wall_s"]["min"] <= summary["wall_s"]["max"]
        assert summary["train_loss"] is not None
    assert len(result["targets"]) == 2
    json.loads(json.dumps(result))  # --json writes plain data
    report = to_markdown(result)
    for label in ("Feedline (pipeline run)", "Ray Train + Ray Data", "torch DDP + DataLoader",
                  "final train loss", "train_raytrain.py", "train_ddp.py", "nproc"):
        assert label in report
    console = Console(record=True, width=200)
    for table in tables(result):
        console.print(table)
    assert "torch DDP + DataLoader" in console.export_text()
