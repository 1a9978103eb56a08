"""End to end on the session's local Ray: the examples, embedding, bad samples, the planner."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import pipeline
from pipeline.errors import PlanError

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


@pytest.mark.timeout(420)
def test_quickstart_trains_digits_to_90_percent(ray_cluster, tmp_path):
    result = pipeline.run(QUICKSTART, show_progress=False, **{"run.output": str(tmp_path)})
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary == result.summary
    assert summary["status"] == "succeeded"
    assert summary["val_accuracy"] >= 0.90
    assert summary["ray_address"] == ray_cluster
    num_train = summary["data"]["num_train"]
    assert summary["data"]["num_train"] + summary["data"]["num_val"] == 1797
    assert summary["samples"] == summary["epochs"] * num_train  # every sample, every epoch
    # every validation sample scored: validation is split unevenly (an even split over the 2
    # ranks scored 362 of 363)
    assert summary["val_metrics"]["val_samples"] == summary["data"]["num_val"]
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines] == list(range(1, summary["epochs"] + 1))
    assert lines[-1]["val_accuracy"] == summary["val_accuracy"]
    state = torch.load(tmp_path / "checkpoint" / "model.pt", weights_only=True)
    assert state["epoch"] == summary["epochs"] and "model" in state
    assert ray_is_still_up()


def ray_is_still_up():
    import ray

    return ray.is_initialized()


def write_images(root, per_class, bad_kinds=()):
    from PIL import Image

    rng = np.random.default_rng(0)
    for label in range(2):
        (root / str(label)).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            # class 0 dark, class 1 bright: learnable in one epoch
            base = 60 if label == 0 else 190
            pixels = np.clip(rng.normal(base, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / str(label) / f"{i:03d}.jpg")
    for i, kind in enumerate(bad_kinds):
        path = root / str(i % 2) / f"bad{i}.jpg"
        if kind == "empty":
            path.write_bytes(b"")
        elif kind == "garbage":
            path.write_bytes(os.urandom(200))
        else:  # truncated
            good = (root / "0" / "000.jpg").read_bytes()
            path.write_bytes(good[: len(good) // 3])
    return root


@pytest.mark.timeout(300)
def test_image_folder_with_bad_files_quarantines_them_under_a_task_given_in_python(
        ray_cluster, tmp_path):
    from tests.integration.tasks_for_tests import OFFSET, OffsetTask

    images = write_images(tmp_path / "imgs", 40, bad_kinds=("empty", "garbage", "truncated"))
    result = pipeline.run(QUICKSTART, show_progress=False, task=OffsetTask(), sets=[
        "data.source.kind=image_folder", f"data.source.path={images}", "data.channels=3",
        "data.image_size=[16, 16]", "train.epochs=2", "train.grad_accum_steps=2",
        "train.lr_schedule=cosine", f"run.output={tmp_path / 'out'}"])
    summary = result.summary
    assert summary["bad_samples"] == 3
    records = [json.loads(x) for x in (result.output / "quarantine.jsonl").read_text().splitlines()]
    assert sorted(Path(r["source"]).name for r in records) == ["bad0.jpg", "bad1.jpg", "bad2.jpg"]
    assert all(r["stage"] == "decode" and r["error_type"] for r in records)
    assert summary["data"]["classes"] == ["0", "1"]

    # the task was the one trained, evaluated and recorded
    assert summary["task"] == "tests.integration.tasks_for_tests.OffsetTask"
    assert OFFSET <= summary["train_loss"] < OFFSET + 10  # cross-entropy plus its offset
    assert summary["exactly_once"] is True  # the quarantined samples accounted as such
    metrics = summary["val_metrics"]
    assert 0 < metrics["val_samples"] <= summary["data"]["num_val"]
    assert 0.0 <= metrics["val_accuracy"] <= 1.0 and metrics["val_label_sum"] > 0
    state = torch.load(result.output / "checkpoint" / "model.pt", weights_only=True)
    assert state["epoch"] == 2 and "scheduler" in state  # the schedule resumes with the run
    meta = json.loads((result.output / "checkpoint" / "meta.json").read_text())
    assert meta["task"] == summary["task"]


@pytest.mark.timeout(300)
def test_parquet_features_with_mlp_and_user_transform(ray_cluster, tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 600)
    x = rng.normal(0, 1, (600, 4)) + y[:, None] * 2.0
    pq.write_table(pa.table({"a": x[:, 0], "b": x[:, 1], "c": x[:, 2], "d": x[:, 3], "label": y}),
                   tmp_path / "t.parquet", row_group_size=100)
    result = pipeline.run(QUICKSTART, show_progress=False, sets=[
        "data.source.kind=parquet", f"data.source.path={tmp_path / 't.parquet'}",
        "data.transform=tests.integration.transforms:scale_features",
        "train.model=mlp", "train.epochs=2", f"run.output={tmp_path / 'out'}"])
    assert result.summary["val_accuracy"] > 0.9
    assert result.summary["data"]["num_train"] + result.summary["data"]["num_val"] == 600


@pytest.mark.timeout(60)
def test_planner_refuses_starving_plan_quickly(ray_cluster, tmp_path):
    start = time.monotonic()
    with pytest.raises(PlanError, match=r"train.cpus_per_worker \(4\) = 8 of the cluster's 8"):
        pipeline.run(QUICKSTART, show_progress=False, **{
            "train.cpus_per_worker": 4, "run.output": str(tmp_path)})
    assert time.monotonic() - start < 30


@pytest.mark.timeout(120)
def test_cli_exits_3_on_starving_plan_against_a_cluster(ray_cluster, tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pipeline", "run", str(QUICKSTART), "--address", ray_cluster,
         "--set", "train.num_workers=8", "--set", "train.cpus_per_worker=1",
         "--output", str(tmp_path)],
        capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert out.returncode == 3, out.stderr[-2000:]
    assert "plan starves preprocessing" in out.stderr


@pytest.mark.timeout(300)
def test_a_run_whose_loss_turns_nan_stops_as_diverged_and_keeps_its_last_good_checkpoint(
        ray_cluster, tmp_path):
    """Issue 30: a NaN loss used to train on, save NaN weights and end ``succeeded`` with bare
    NaN in summary.json. The quickstart's epoch is 23 steps per worker: NaN from step 30."""
    from pipeline.errors import NonFiniteLossError
    from pipeline.job.runner import last_checkpoint
    from tests.integration.tasks_for_tests import DivergingTask

    out = tmp_path / "out"
    with pytest.raises(NonFiniteLossError, match=r"NaN or infinite in \d+ step\(s\) by epoch 2 "
                                                 r"\(train.max_nonfinite_steps is 0\).*Lower "
                                                 r"train.lr \(now 0.05\)"):
        pipeline.run(QUICKSTART, show_progress=False, task=DivergingTask(after=30),
                     sets=["train.epochs=3", f"run.output={out}"])
    summary = json.loads((out / "summary.json").read_text())  # strict JSON: it parses
    assert summary["status"] == "diverged" and "NonFiniteLossError" in summary["error"]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["epoch"] for m in lines if "train_loss" in m] == [1]  # epoch 2 never reported
    good = last_checkpoint(out)  # what a rerun resumes from: epoch 1's, never a NaN one
    assert good["epoch"] == 1 and good["step"] == 0
    state = torch.load(Path(good["path"]) / "model.pt", weights_only=True)
    assert all(torch.isfinite(v).all() for v in state["model"].values())
