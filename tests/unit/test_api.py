"""``pipeline.run`` says what a run directory holds before starting Ray: it refuses a finished
run or one still going, and names a failed, stopped or killed one it resumes."""

import json
from pathlib import Path

import pytest

import pipeline
from pipeline.config import ConfigError

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


def test_a_killed_run_is_named_for_what_it_is_and_resumed(tmp_path):
    import os
    import subprocess
    import sys

    from pipeline.api import previous_run
    from pipeline.procfs import stat

    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    running(tmp_path, int(gone.stdout), 1)  # exited: its pid is free or someone else's
    assert previous_run(tmp_path) == (
        f"{tmp_path}: the run there ended without a word (process {int(gone.stdout)} on "
        f"{__import__('socket').gethostname()} is gone: killed?); no checkpoint: starting again")
    # a live process under the recorded pid, started at another time: a reused pid, not the run
    running(tmp_path, os.getpid(), stat(os.getpid()).start + 1)
    assert "ended without a word" in previous_run(tmp_path)


def test_a_stopped_or_failed_run_is_said_before_it_resumes(tmp_path):
    from pipeline.api import previous_run

    (tmp_path / "summary.json").write_text(json.dumps({"status": "stopped",
                                                       "signal": "SIGTERM"}))
    assert "the run there was stopped by SIGTERM; no checkpoint" in previous_run(tmp_path)
    (tmp_path / "summary.json").write_text(json.dumps({"status": "failed",
                                                       "error": "OSError: disk full"}))
    assert "the run there failed (OSError: disk full)" in previous_run(tmp_path)
    assert previous_run(tmp_path / "new") is None


def test_a_task_that_cannot_be_imported_is_refused_before_ray_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"train.task \('no_such_pkg.tasks:Mine'\): cannot "
                                          r"import 'no_such_pkg.tasks'"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}",
                                       "train.task=no_such_pkg.tasks:Mine"])
    assert not (tmp_path / "config.yaml").exists()  # refused before the run began
