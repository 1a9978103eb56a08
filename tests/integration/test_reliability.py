"""Exactly-once delivery with bad samples and faults, checked id by id."""

import json
from pathlib import Path

import numpy as np
import pytest

import pipeline
from tests.integration.test_run import QUICKSTART

KINDS = ("empty", "garbage", "truncated")


def image_folder(root: Path, good: int, bad: int) -> Path:
    from PIL import Image

    rng = np.random.default_rng(1)
    for i in range(good + bad):
        label = i % 2
        path = root / str(label) / f"{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        pixels = np.clip(rng.normal(60 + 130 * label, 30, (16, 16, 3)), 0, 255).astype(np.uint8)
        Image.fromarray(pixels).save(path)
    # spread the bad files among the good ones, so they share blocks and batches with them
    bad_paths = sorted(root.rglob("*.jpg"))[:: (good + bad) // bad][:bad]
    for n, path in enumerate(bad_paths):
        kind = KINDS[n % len(KINDS)]
        data = path.read_bytes()
        path.write_bytes(b"" if kind == "empty" else
                         np.random.default_rng(n).bytes(300) if kind == "garbage" else
                         data[: len(data) // 3])
    return root


def run_folder(folder: Path, out: Path, *sets: str):
    return pipeline.run(QUICKSTART, show_progress=False, sets=[
        "data.source.kind=image_folder", f"data.source.path={folder}", "data.val_fraction=0",
        "data.image_size=[16, 16]", "train.epochs=2", f"run.output={out}", *sets])


@pytest.mark.timeout(400)
def test_bad_samples_are_quarantined_and_the_rest_delivered_once(ray_cluster, tmp_path):
    folder = image_folder(tmp_path / "imgs", good=975, bad=25)
    summary = run_folder(folder, tmp_path / "out").summary
    records = [json.loads(x) for x in (tmp_path / "out/quarantine.jsonl").read_text().splitlines()]
    assert len(records) == 25 == summary["bad_samples"]
    assert {r["error_type"] for r in records} >= {"ValueError", "UnidentifiedImageError", "OSError"}
    for epoch in summary["accounting"]:
        assert epoch["quarantined"] == 25 and epoch["lost"] == 0 and epoch["duplicated"] == 0
        assert epoch["unique"] + len(epoch["split_remainder"]) == 975
    assert summary["exactly_once"] is True


@pytest.mark.timeout(400)
def test_too_many_bad_samples_abort_with_the_threshold(ray_cluster, tmp_path):
    folder = image_folder(tmp_path / "imgs", good=940, bad=60)
    with pytest.raises(Exception, match=r"data.max_bad_fraction \(0.05\) exceeded") as info:
        run_folder(folder, tmp_path / "out")
    assert "first:" in str(info.value)
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["status"] == "failed" and "max_bad_fraction" in summary["error"]


@pytest.mark.timeout(400)
@pytest.mark.parametrize("seed", [3, 11])
def test_killed_preprocessing_actor_loses_and_duplicates_nothing(ray_cluster, tmp_path, seed):
    from tests.integration.transforms import KILL_PLAN

    fraction = np.random.default_rng(seed).uniform(0.2, 0.6)  # the kill point, seeded
    done = tmp_path / "killed"
    KILL_PLAN.write_text(json.dumps({"after": int(1434 * fraction), "done": str(done)}))
    try:
        summary = pipeline.run(QUICKSTART, show_progress=False, sets=[
            "data.transform=tests.integration.transforms:kill_once", "train.epochs=1",
            f"run.output={tmp_path / 'out'}"]).summary
    finally:
        KILL_PLAN.unlink()
    assert done.exists(), "the preprocessing actor was never killed"
    [epoch] = summary["accounting"]
    assert (epoch["lost"], epoch["duplicated"], epoch["unknown"]) == (0, 0, 0), epoch
    assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]


@pytest.mark.timeout(500)
@pytest.mark.parametrize("seed", [5])
def test_killed_training_worker_resumes_mid_epoch_exactly_once(ray_cluster, tmp_path, seed):
    from tests.integration.models import KILL_PLAN

    step = int(np.random.default_rng(seed).integers(8, 20))  # the kill point, seeded
    done = tmp_path / "killed"
    KILL_PLAN.write_text(json.dumps({"rank": 1, "step": step, "done": str(done)}))
    try:
        summary = pipeline.run(QUICKSTART, show_progress=False, sets=[
            "train.model=tests.integration.models:dies_once_cnn", "train.epochs=2",
            "train.max_failures=1", "train.checkpoint_every=5",
            f"run.output={tmp_path / 'out'}"]).summary
    finally:
        KILL_PLAN.unlink()
    assert done.exists(), "the training worker was never killed"
    assert summary["status"] == "succeeded" and summary["restarts"] == 1
    [resumed] = summary["resumed_from"]
    # the last checkpoint Ray Train registered before the crash: a multiple of 5 steps
    assert resumed["epoch"] == 0 and resumed["step"] in range(5, step + 1, 5)
    assert resumed["consumed"] == 2 * resumed["step"] * 32  # two ranks, 32 samples a step
    for epoch in summary["accounting"]:  # committed samples: unique and complete
        assert (epoch["lost"], epoch["duplicated"]) == (0, 0), epoch
        assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]
