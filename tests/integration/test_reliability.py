"""Exactly-once delivery with bad samples and faults, checked id by id."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

import pipeline
from pipeline.config import load_config
from pipeline.data.synthetic import corrupt_files
from pipeline.job.network import nccl_advice
from pipeline.job.runner import _POLL_ENV, CONTROLLER_POLL_S
from tests.integration.models import WORKER_ENV
from tests.integration.test_run import QUICKSTART


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
    corrupt_files(sorted(root.rglob("*.jpg"))[:: (good + bad) // bad][:bad])
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
def test_a_killed_decoding_process_loses_and_duplicates_nothing(ray_cluster, tmp_path, seed):
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
    assert done.exists(), "no decoding process was killed"
    [epoch] = summary["accounting"]
    assert (epoch["lost"], epoch["duplicated"], epoch["unknown"]) == (0, 0, 0), epoch
    assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]


@pytest.mark.timeout(300)
def test_a_controller_killed_mid_run_leaves_no_placement_group_behind(ray_cluster, tmp_path):
    """Feedline starts no PlacementGroupCleaner actor (pipeline.job.abortable), nor a
    PreemptionWatcher on a local Ray: the driver removes the worker group's placement group
    that the dead controller left, so a driver that lives on (a notebook, a sweep) gets the
    run's CPUs back."""
    import ray

    def live_groups():
        return {pg for pg, info in ray.util.placement_group_table().items()
                if info["state"] != "REMOVED"}

    before, actors_before = live_groups(), set(ray._private.state.actors())
    WORKER_ENV.unlink(missing_ok=True)
    with pytest.raises(Exception, match="(?i)actor|died|controller"):
        pipeline.run(QUICKSTART, show_progress=False, sets=[
            "train.model=tests.integration.models:kills_controller_cnn", "train.epochs=1",
            f"run.output={tmp_path / 'out'}"])
    assert live_groups() == before
    # The Train workers got Ray Train's settings through the controller, and Feedline's
    # network advice, in their own process instead of a runtime env (pipeline.job.abortable)
    worker_env = json.loads(WORKER_ENV.read_text())
    advised = nccl_advice(load_config(QUICKSTART))["env"]
    assert advised and advised.items() <= worker_env.items(), (advised, worker_env)
    assert worker_env[_POLL_ENV] == str(CONTROLLER_POLL_S)
    summary = json.loads((tmp_path / "out/summary.json").read_text())
    assert summary["status"] == "failed"
    # neither of Ray Train's helper actors ran for this run (local_ray_env); other tests' own
    # Ray Train loops (TorchTrainer, Ray's defaults) share this Ray, so only this run's count
    started = {a.get("ActorClassName") for key, a in ray._private.state.actors().items()
               if key not in actors_before}
    assert "RayTrainWorker" in started
    assert not started & {"PlacementGroupCleaner", "PreemptionWatcher"}, started


# Deterministic runs with a per-epoch shuffle and random flips and crops, that checkpoint every
# 5 steps (22 steps an epoch, 2 ranks of 32 samples a step); the model kills its worker when
# KILL_PLAN says so.
DETERMINISTIC = ("train.deterministic=true", "train.checkpoint_every=5",
                 "train.keep_checkpoints=20", "train.epochs=2", "data.shuffle_buffer=256",
                 "data.augment.hflip=0.5", "data.augment.crop_padding=2",
                 "train.model=tests.integration.models:dies_once_cnn")
BATCH = 32


@pytest.fixture(scope="module")
def clean_run(ray_cluster, tmp_path_factory):
    """The reference: the deterministic run with no fault."""
    out = tmp_path_factory.mktemp("clean") / "out"
    return pipeline.run(QUICKSTART, show_progress=False,
                        sets=[*DETERMINISTIC, f"run.output={out}"])


def weights(output: Path) -> dict:
    return torch.load(output / "checkpoint/model.pt", weights_only=True)["model"]


def assert_same_weights(output: Path, reference) -> None:
    mine, theirs = weights(output), weights(reference.output)
    assert mine.keys() == theirs.keys()
    for name, tensor in mine.items():
        assert torch.equal(tensor, theirs[name]), f"{name} differs"


def assert_exactly_once(summary) -> None:
    assert summary["status"] == "succeeded" and summary["exactly_once"] is True
    assert [a["epoch"] for a in summary["accounting"]] == list(range(1, summary["epochs"] + 1))
    for epoch in summary["accounting"]:  # committed samples: unique and complete
        assert (epoch["lost"], epoch["duplicated"]) == (0, 0), epoch
        assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]


@pytest.mark.timeout(300)
def test_deterministic_runs_repeat_every_batch(clean_run, tmp_path):
    again = pipeline.run(QUICKSTART, show_progress=False,
                         sets=[*DETERMINISTIC, f"run.output={tmp_path / 'out'}"])
    first, second = (np.load(r.output / "delivered.npz") for r in (clean_run, again))
    assert sorted(first.files) == sorted(second.files) == [
        "e1_rank0", "e1_rank1", "e2_rank0", "e2_rank1"]
    for key in first.files:
        assert np.array_equal(first[key], second[key]), key
    for rank in (0, 1):  # each epoch shuffles anew: the same rows, another order
        one, two = first[f"e1_rank{rank}"], first[f"e2_rank{rank}"]
        assert not np.array_equal(one, two) and np.array_equal(np.sort(one), np.sort(two))
    assert_same_weights(again.output, clean_run)


@pytest.mark.timeout(300)
def test_restore_without_a_fault_gives_the_same_remaining_batches(clean_run, tmp_path):
    step = 10
    [saved] = [m.parent for m in (clean_run.output / "ray/train").glob("*/meta.json")
               if json.loads(m.read_text())["step"] == step
               and json.loads(m.read_text())["epoch"] == 0]
    resumed = pipeline.run(QUICKSTART, show_progress=False, sets=[
        *DETERMINISTIC, f"train.resume_from={saved}", f"run.output={tmp_path / 'out'}"])
    assert resumed.summary["resumed_from"] == [
        {"epoch": 0, "step": step, "consumed": 2 * step * BATCH}]
    before, after = (np.load(r.output / "delivered.npz") for r in (clean_run, resumed))
    for rank in (0, 1):  # the rest of the epoch: the same batches, in the same order
        assert np.array_equal(after[f"e1_rank{rank}"], before[f"e1_rank{rank}"][step * BATCH:])
        assert np.array_equal(after[f"e2_rank{rank}"], before[f"e2_rank{rank}"])
    first_steps = np.concatenate([before[f"e1_rank{r}"][:step * BATCH] for r in (0, 1)])
    assert np.array_equal(np.sort(after["e1_before_restart"]), np.sort(first_steps))
    assert_exactly_once(resumed.summary)
    assert_same_weights(resumed.output, clean_run)


@pytest.mark.timeout(400)
@pytest.mark.parametrize(("seed", "recovery"), [(5, "restart"), (8, "rerun")])
def test_killed_training_worker_resumes_mid_epoch_to_the_same_weights(clean_run, tmp_path, seed,
                                                                       recovery):
    """``restart``: Ray Train restarts the workers (max_failures=1). ``rerun``: the run fails,
    and running it again into the same run directory resumes from its last checkpoint."""
    from tests.integration.models import KILL_PLAN

    step = int(np.random.default_rng(seed).integers(6, 21))  # the kill point, seeded
    done = tmp_path / "killed"
    KILL_PLAN.write_text(json.dumps({"rank": 1, "step": step, "done": str(done)}))
    sets = [*DETERMINISTIC, f"run.output={tmp_path / 'out'}"]
    try:
        if recovery == "restart":
            summary = pipeline.run(QUICKSTART, show_progress=False,
                                   sets=[*sets, "train.max_failures=1"]).summary
        else:
            with pytest.raises(Exception, match="(?i)worker|actor|died"):
                pipeline.run(QUICKSTART, show_progress=False, sets=sets)
            summary = pipeline.run(QUICKSTART, show_progress=False, sets=sets).summary
    finally:
        KILL_PLAN.unlink()
    assert done.exists(), "the training worker was never killed"
    assert summary["restarts"] == (1 if recovery == "restart" else 0)
    [resumed] = summary["resumed_from"]
    # the last checkpoint Ray Train registered before the crash: a multiple of 5 steps
    assert resumed["epoch"] == 0 and resumed["step"] in range(5, step + 1, 5)
    assert resumed["consumed"] == 2 * resumed["step"] * BATCH
    assert_exactly_once(summary)
    assert_same_weights(tmp_path / "out", clean_run)
