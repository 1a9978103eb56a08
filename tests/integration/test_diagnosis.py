"""The profiler names the bottleneck of real runs: slow preprocessing, slow model, slow rank."""

import json
from pathlib import Path

import pytest

import pipeline

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"


def run(tmp_path, *sets):
    result = pipeline.run(QUICKSTART, show_progress=False,
                          sets=["train.epochs=1", f"run.output={tmp_path}", *sets])
    return result.summary


@pytest.mark.timeout(300)
def test_slow_preprocessing_is_input_bound(ray_cluster, tmp_path):
    summary = run(tmp_path, "data.transform=tests.integration.transforms:slow_preprocessing",
                  "data.batch_size=8", "data.concurrency=[1, 1]")
    diagnosis = summary["diagnosis"]
    assert diagnosis["verdict"] == "input_bound", diagnosis
    assert summary["data_wait_fraction"] > 0.5
    assert any("data.concurrency" in a for a in diagnosis["advice"]), diagnosis["advice"]
    assert (tmp_path / "report.md").read_text().count("input_bound") >= 1


@pytest.mark.timeout(300)
def test_slow_model_is_compute_bound(ray_cluster, tmp_path):
    summary = run(tmp_path, "train.model=tests.integration.models:slow_cnn")
    assert summary["diagnosis"]["verdict"] == "compute_bound", summary["diagnosis"]
    assert summary["step_breakdown"]["forward"] > 0.07  # the 80 ms sleep, per step


@pytest.mark.timeout(300)
def test_one_slow_rank_is_a_straggler_and_named(ray_cluster, tmp_path):
    summary = run(tmp_path, "train.model=tests.integration.models:slow_rank_one_cnn")
    diagnosis = summary["diagnosis"]
    assert diagnosis["verdict"] == "straggler", diagnosis
    assert any("rank 1" in a for a in diagnosis["advice"]), diagnosis["advice"]
    # rank 0 waits for rank 1 inside the all-reduce: that wait shows as its exposed comm
    ranks = json.loads((tmp_path / "profile.json").read_text())["ranks"]
    assert ranks["0"]["phases"]["comm_exposed"]["sum"] > ranks["1"]["phases"]["comm_exposed"]["sum"]


@pytest.mark.timeout(300)
def test_timeline_and_plot_are_real(ray_cluster, tmp_path):
    run(tmp_path)
    trace = json.loads((tmp_path / "timeline.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    pids = {e["pid"] for e in events if e.get("ph") == "X"}
    assert {0, 1} <= pids  # both ranks
    phases = {e["name"] for e in events if e.get("ph") == "X" and e["pid"] in (0, 1)}
    assert {"data_wait", "forward", "backward"} <= phases
    from PIL import Image

    image = Image.open(tmp_path / "breakdown.png").convert("RGB")
    assert image.size[0] > 400 and len(set(image.getdata())) > 20  # not blank
