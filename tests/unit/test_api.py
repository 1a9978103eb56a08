"""``pipeline.run`` says what a run directory holds before starting Ray: it refuses a finished
run or one still going, and names a failed, stopped or killed one it resumes."""

import json
from pathlib import Path

import pytest

import pipeline
from pipeline.config import ConfigError
from pipeline.job.rundir import RunDir
from pipeline.job.summary import RunSummary

QUICKSTART = Path(__file__).resolve().parents[2] / "examples/quickstart.yaml"


def test_a_finished_run_directory_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "succeeded"}))
    with pytest.raises(ConfigError, match=r"run.output .* already holds a finished run"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])


def test_a_missing_resume_checkpoint_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"train.resume_from .* not a checkpoint folder"):
        pipeline.run(QUICKSTART, sets=[f"train.resume_from={tmp_path}"])


def running(tmp_path: Path, pid: int, pid_start: int | None) -> None:
    """The ``summary.json`` a run leaves while it goes (and after a SIGKILL)."""
    import socket

    (tmp_path / "summary.json").write_text(json.dumps({
        "status": "running", "pid": pid, "pid_start": pid_start, "host": socket.gethostname(),
        "started": "2026-12-03T19:00:00+0000"}))


def test_a_directory_a_live_run_holds_is_refused_with_its_process(tmp_path):
    import os

    from pipeline.procfs import stat

    running(tmp_path, os.getpid(), stat(os.getpid()).start)
    with pytest.raises(ConfigError, match=rf"in use by a run still going \(process "
                                          rf"{os.getpid()}.*kill -INT {os.getpid()}"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])


def claim(path: Path) -> str | None:
    """What a run says of the folder when it takes it (and lets it go again)."""
    with RunDir(path).claim() as found:
        return found


def test_a_killed_run_is_named_for_what_it_is_and_resumed(tmp_path):
    import os
    import subprocess
    import sys

    from pipeline.procfs import stat

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    running(tmp_path, int(gone.stdout), 1)  # exited: its pid is free or someone else's
    assert claim(tmp_path) == (
        f"{tmp_path}: the run there ended without a word (process {int(gone.stdout)} on "
        f"{__import__('socket').gethostname()} is gone: killed?); no checkpoint: starting again")
    # a live process under the recorded pid, started at another time: a reused pid, not the run
    running(tmp_path, os.getpid(), stat(os.getpid()).start + 1)
    assert "ended without a word" in claim(tmp_path)


def test_a_stopped_failed_or_diverged_run_is_said_before_it_resumes(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped",
                                                       "signal": "SIGTERM"}))
    assert "the run there was stopped by SIGTERM; no checkpoint" in claim(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed",
                                                       "error": "OSError: disk full"}))
    assert "the run there failed (OSError: disk full)" in claim(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged", "error": "NaN"}))
    assert "the run there diverged (NaN)" in claim(tmp_path)
    assert claim(tmp_path / "new") is None


HOLD = """
import sys
from pathlib import Path
from pipeline.job.rundir import RunDir
from pipeline.job.summary import RunSummary
with RunDir(Path(sys.argv[1])).claim():
    print("claimed", flush=True)
    sys.stdin.read()  # holds the folder until the test closes our stdin
"""


def test_a_second_run_on_a_held_folder_is_refused_and_the_lock_goes_with_its_process(tmp_path):
    """Two runs started at the same moment: the one that claims second is refused, though the
    first has not written its summary yet; once the first process is gone, the folder is free."""
    import subprocess
    import sys

    first = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert first.stdout.readline().strip() == "claimed"
        with pytest.raises(ConfigError, match=r"is in use by a run still going; wait for it"):
            claim(tmp_path)
        with pytest.raises(ConfigError, match=r"in use by a run still going"):
            pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])
    finally:
        first.communicate("", timeout=60)  # its stdin closes: it lets go and exits
    assert claim(tmp_path) is None


def test_a_run_whose_summary_is_damaged_is_neither_resumed_nor_overwritten(tmp_path):
    (tmp_path / "checkpoint").mkdir()
    (tmp_path / "metrics.jsonl").write_text('{"epoch": 1}\n')
    (tmp_path / "summary.json").write_text('{"status": "succ')  # cut mid-write
    with pytest.raises(ConfigError, match=r"holds a run \(checkpoint, metrics.jsonl\) but "
                                          r"summary.json is unreadable \(JSONDecodeError"):
        claim(tmp_path)
    (tmp_path / "summary.json").unlink()
    with pytest.raises(ConfigError, match=r"summary.json is missing: its state is unknown"):
        claim(tmp_path)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"epoch": 1}\n'  # untouched


def test_a_folder_of_someone_elses_files_is_refused(tmp_path):
    (tmp_path / "config.yaml").write_text("my: own\n")
    (tmp_path / "report.md").write_text("# mine\n")
    with pytest.raises(ConfigError, match=r"holds files that are not a Feedline run's "
                                          r"\(config.yaml, report.md\)"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])
    assert (tmp_path / "config.yaml").read_text() == "my: own\n"


def test_summaries_are_strict_json(tmp_path):
    rundir = RunDir(tmp_path)
    rundir.write_summary(RunSummary(status="diverged", name="q", epochs=2,
                                    train_loss=float("nan"),
                                    val_metrics={"per_epoch": [1.0, float("inf")]}))
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    read = json.loads(text)
    assert (read["train_loss"], read["val_metrics"]) == (None, {"per_epoch": [1.0, None]})
    assert rundir.read_summary().status == "diverged"


def test_a_task_that_cannot_be_imported_is_refused_before_ray_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"train.task \('no_such_pkg.tasks:Mine'\): cannot "
                                          r"import 'no_such_pkg.tasks'"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}",
                                       "train.task=no_such_pkg.tasks:Mine"])
    assert not (tmp_path / "config.yaml").exists()  # refused before the run began


def test_a_resume_trains_the_task_its_checkpoints_were_made_by(tmp_path):
    """A task given to pipeline.run(task=...) reaches the resume command when it can be rebuilt
    by name; a rerun with another task than the checkpoints' is refused before Ray starts."""
    from pipeline.api import _task_set
    from pipeline.config import load_config
    from pipeline.train.task import ClassificationTask, task_setting
    from tests.unit.train.tasks import WeightedSumTask

    cfg = load_config(QUICKSTART)
    assert task_setting(WeightedSumTask()) == "tests.unit.train.tasks:WeightedSumTask"
    assert _task_set(cfg, WeightedSumTask(), WeightedSumTask()) == [
        "train.task=tests.unit.train.tasks:WeightedSumTask"]
    assert _task_set(cfg, ClassificationTask(), ClassificationTask()) == []  # the config's own
    assert _task_set(cfg, ClassificationTask(), None) == []

    class Local(ClassificationTask):  # not importable by its name: no resume command
        pass

    assert task_setting(Local()) is None and _task_set(cfg, Local(), Local()) is None

    checkpoint = tmp_path / "ray" / "train" / "checkpoint_1"
    checkpoint.mkdir(parents=True)
    import torch

    torch.save({"model": {}}, checkpoint / "model.pt")
    (checkpoint / "meta.json").write_text(json.dumps(
        {"task": "tests.unit.train.tasks.WeightedSumTask", "epoch": 1, "step": 0}))
    (tmp_path / "ray" / "train" / "checkpoint_manager_snapshot.json").write_text(json.dumps(
        {"latest_checkpoint_result": {"checkpoint_dir_name": "checkpoint_1"}}))
    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped", "signal": "SIGINT"}))
    with pytest.raises(ConfigError, match=r"holds checkpoints of task 'tests.unit.train.tasks."
                                          r"WeightedSumTask', but this run trains "
                                          r"'classification'"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])


def test_a_resume_with_changed_settings_keeps_each_segments_config_and_says_what_changed(
        tmp_path):
    rundir = RunDir(tmp_path)
    first = {"train": {"batch_size": 32, "lr": 0.05}, "data": {"seed": 0}}
    assert rundir.write_config(first) == []  # a fresh folder
    assert rundir.write_config(first) == []  # resumed as it was: nothing kept aside
    assert not (tmp_path / "config-1.yaml").exists()
    second = {"train": {"batch_size": 64, "lr": 0.05}, "data": {"seed": 0}}
    assert rundir.write_config(second) == ["train.batch_size: 32 -> 64"]
    third = {"train": {"batch_size": 64, "lr": 0.1}, "data": {"seed": 0}}
    assert rundir.write_config(third) == ["train.lr: 0.05 -> 0.1"]
    import yaml

    assert yaml.safe_load((tmp_path / "config-1.yaml").read_text()) == first
    assert yaml.safe_load((tmp_path / "config-2.yaml").read_text()) == second
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == third


@pytest.mark.parametrize("damage", ["meta", "model"])
def test_a_damaged_checkpoint_is_refused_before_ray_starts(tmp_path, damage):
    import torch

    checkpoint = tmp_path / "ray" / "train" / "checkpoint_1"
    checkpoint.mkdir(parents=True)
    model = torch.nn.Linear(2, 2)
    torch.save({"model": model.state_dict()}, checkpoint / "model.pt")
    (checkpoint / "meta.json").write_text(json.dumps({"epoch": 1, "step": 0}))
    if damage == "meta":
        (checkpoint / "meta.json").write_text("")
    else:
        (checkpoint / "model.pt").write_bytes((checkpoint / "model.pt").read_bytes()[:100])
    (tmp_path / "ray" / "train" / "checkpoint_manager_snapshot.json").write_text(json.dumps(
        {"latest_checkpoint_result": {"checkpoint_dir_name": "checkpoint_1"}}))
    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped", "signal": "SIGINT"}))
    name = "meta.json" if damage == "meta" else "model.pt"
    with pytest.raises(ConfigError, match=rf"the checkpoint to resume from is damaged: "
                                          rf".*checkpoint_1/{name}: .*; remove .*checkpoint_1 "
                                          rf"to resume from the checkpoint before it"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])  # ray.init raises here
