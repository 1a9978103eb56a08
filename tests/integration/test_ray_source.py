"""A Ray Dataset of the user's as the source, with a task of the user's: handed to
``pipeline.run(datasets=...)`` (rows without ids get their position in the dataset as id; the
task fails the run if a row's id is not its position) or named by ``data.source.kind: ray``
(the language model example). Every epoch is accounted exactly once; the outputs are those of
any other run."""

import json
from pathlib import Path

import numpy as np
import pytest

import pipeline
from pipeline.config import ConfigError
from tests.integration.datasets_for_tests import (
    broken_rows,
    narrower_rows,
    position_rows,
    write_position_rows,
)
from tests.integration.tasks_for_tests import PositionTask

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
EPOCHS = 2


def check_outputs(out: Path, summary: dict, train_rows: int) -> None:
    assert summary["status"] == "succeeded", summary
    assert [a["epoch"] for a in summary["accounting"]] == list(range(1, EPOCHS + 1))
    for row in summary["accounting"]:  # every epoch: the second runs the user's dataset again
        assert (row["lost"], row["duplicated"], row["unknown"]) == (0, 0, 0), row
        assert row["expected"] == train_rows, row
        assert row["unique"] + len(row["split_remainder"]) == train_rows, row
    assert summary["data"]["classes"] == ["0", "1"]
    for name in ("report.md", "metrics.jsonl", "timeline.json", "delivered.npz"):
        assert (out / name).exists(), name
    assert summary["diagnosis"]["verdict"]


@pytest.mark.timeout(300)
def test_a_read_parquet_dataset_without_ids_trains_exactly_once_per_epoch(ray_cluster,
                                                                          tmp_path):
    rows = write_position_rows(tmp_path / "rows")
    out = tmp_path / "out"
    result = pipeline.run(QUICKSTART, show_progress=False, task=PositionTask(),
                          datasets=position_rows(str(tmp_path / "rows")),
                          sets=[f"train.epochs={EPOCHS}", "data.cache=off",
                                "data.val_fraction=0.25", f"run.output={out}"])
    num_train = result.summary["data"]["num_train"]
    assert num_train + result.summary["data"]["num_val"] == rows
    assert 0.15 * rows < result.summary["data"]["num_val"] < 0.35 * rows
    check_outputs(out, result.summary, num_train)
    with np.load(out / "delivered.npz") as delivered:  # positions, and no validation row
        ids = np.concatenate([delivered[k] for k in delivered.files if k.startswith("e1_")])
    assert ids.min() >= 0 and ids.max() < rows
    config = (out / "config.yaml").read_text()
    assert "kind: ray" in config


@pytest.mark.timeout(300)
def test_a_validation_set_of_another_shape_is_refused_before_training(ray_cluster, tmp_path):
    write_position_rows(tmp_path / "rows", files=1, rows=50)
    out = tmp_path / "out"
    rows = str(tmp_path / "rows")
    with pytest.raises(ConfigError) as refused:
        pipeline.run(QUICKSTART, show_progress=False, task=PositionTask(),
                     datasets={"train": position_rows(rows), "val": narrower_rows(rows)},
                     sets=[f"run.output={out}"])
    assert "the validation dataset's 'x' column is" in str(refused.value)
    assert "shape=(3,)" in str(refused.value) and "shape=(4,)" in str(refused.value)
    assert not (out / "ray" / "train").exists()  # found while planning: no worker started
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "failed" and "ConfigError" in summary["error"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("how,said", [
    ("ragged", "column 'x' holds rows of different shapes"),
    ("empty", "the training dataset has no rows (and so no columns)"),
    ("raises", "your dataset failed in MapBatches(_fails_on_row_7) while Feedline was reading "
               "the training dataset's columns (planning, before any training): ValueError: "
               "cannot parse row 7: 'n/a' is not a number. Fix that function"),
], ids=["ragged", "empty", "raises"])
def test_a_broken_dataset_is_refused_with_what_to_fix(ray_cluster, tmp_path, how, said):
    write_position_rows(tmp_path / "rows", files=1, rows=20)
    out = tmp_path / "out"
    with pytest.raises(ConfigError) as refused:
        pipeline.run(QUICKSTART, show_progress=False, task=PositionTask(),
                     datasets=broken_rows(str(tmp_path / "rows"), how),
                     sets=[f"run.output={out}"])
    assert said in str(refused.value), str(refused.value)
    assert "Traceback" not in str(refused.value)
    assert not (out / "ray" / "train").exists()


@pytest.mark.timeout(300)
def test_the_language_model_example_learns_with_its_own_validation_files(ray_cluster, tmp_path):
    """``examples/lm.yaml`` as shipped (a ``ray`` source named in the config, returning train
    and validation datasets; the CausalLM task), on a corpus written under ``tmp_path``, one
    training file: every epoch exactly once, validation loss falls below the uniform guess and
    from epoch to epoch, and the diagnosis has a verdict."""
    out = tmp_path / "out"
    args = {"path": str(tmp_path / "corpus"), "seq_len": 128, "train_files": 1, "val_files": 1}
    result = pipeline.run(ROOT / "examples" / "lm.yaml", show_progress=False, sets=[
        f"data.source.args={json.dumps(args)}", f"train.epochs={EPOCHS}", f"run.output={out}"])
    summary = result.summary
    assert summary["status"] == "succeeded", summary
    assert summary["data"]["origin"].endswith("pipeline.workloads.lm:datasets)")
    assert summary["data"]["num_val"] > 0
    train_rows = summary["data"]["num_train"]
    for row in summary["accounting"]:
        assert (row["lost"], row["duplicated"], row["unknown"]) == (0, 0, 0), row
        assert row["unique"] + len(row["split_remainder"]) == train_rows, row
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    val = [e["val_loss"] for e in epochs if "val_loss" in e]
    assert len(val) == EPOCHS and val[-1] < val[0] < np.log(257), val
    assert summary["diagnosis"]["verdict"]
