"""benchmarks/gpu_e2e.sh runs whole on the CPU at a tiny size (GPU_E2E_DRY=1), so the script a
device session runs cannot rot between sessions (issue 27).

Its train step is also the training-job benchmark's check at tiny size (one run serves both):
every contender (``pipeline run``, the hand-written Ray Train script, plain DDP) runs as its own
process with its own local Ray where it uses one, exits 0, trains every image once, and starts
from the same model: one step over the same 64 images from the same seed gives all three the
same loss. No timing asserts."""

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from rich.console import Console

from pipeline.bench.train import CONTENDERS
from pipeline.bench.train_report import to_markdown
from pipeline.cli.bench_train import tables

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = 64  # benchmarks/gpu_e2e.py's dry size


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_the_gpu_script_runs_every_step_dry(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_E2E_DRY="1",
               GPU_E2E_WORK=str(tmp_path / "work"))
    env.pop("RAY_ADDRESS", None)  # every run starts its own local Ray, as on the device
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_e2e.sh")], env=env,
                          capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "gpu-e2e.json").read_text())
    assert result["dry"] and result["errors"] == {}
    assert set(result["seconds"]) == {"env", "train", "diagnosis", "h2d", "profile"}
    rows = {r["contender"]: r for r in result["train"]["rows"]}
    assert set(rows) == {"feedline", "raytrain", "ddp"}
    assert all(r["ok"] and r["samples"] for r in rows.values()), rows
    assert rows["feedline"]["feedline"]["status"] == "succeeded"
    assert set(result["diagnosis"]) == {"input_bound"}  # one injected run dry; three on the GPU
    for injected, run in result["diagnosis"].items():  # verdicts are the GPU run's to judge
        assert run["rc"] == 0 and run["verdict"], (injected, run)
    assert result["h2d"]["bandwidth"] and result["profile"]
    assert (tmp_path / "out" / "gpu-e2e.md").read_text().startswith("# GPU end-to-end check")
    every_contender_finishes_the_same_training(result["train"]["bench"])


def every_contender_finishes_the_same_training(result):
    """``pipeline.bench.train.run_train_bench``'s result, one round of one epoch."""
    runs = result["runs"]
    assert sorted(r["contender"] for r in runs) == sorted(CONTENDERS)
    for run in runs:
        assert run["rc"] == 0 and run["ok"], (run["contender"], run["log_tail"])
        assert run["wall_s"] > 0
        assert run["samples"] == SAMPLES, run  # one epoch over every image, nothing more
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
    report = to_markdown(result)
    for label in ("Feedline (pipeline run)", "Ray Train + Ray Data", "torch DDP + DataLoader",
                  "final train loss", "train_raytrain.py", "train_ddp.py", "nproc"):
        assert label in report
    console = Console(record=True, width=200)
    for table in tables(result):
        console.print(table)
    assert "torch DDP + DataLoader" in console.export_text()
