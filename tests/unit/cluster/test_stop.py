"""Ctrl-C and SIGTERM stop a run through one path; a second one exits at once; the command a
stopped run prints resumes it (real signals to this process or a child; no Ray)."""

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.api import resume_command
from pipeline.cli.main import build_parser
from pipeline.cli.run import stopped_lines
from pipeline.cluster import stop

ROOT = Path(__file__).resolve().parents[3]


def wait_for_signal() -> None:
    # os.kill to this process runs the Python handler before it returns (CPython checks for
    # signals right after sending one to itself), so the handler raised already or never will
    pytest.fail("the signal did not interrupt the main thread")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_the_first_signal_interrupts_and_is_remembered(signum):
    before = signal.getsignal(signum)
    with stop.stop_on_signals():
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signum)
            wait_for_signal()
        assert stop.received() == signum
    assert signal.getsignal(signum) is before


def test_a_sigterm_while_ray_starts_is_the_same_stop():
    with stop.stop_on_signals():
        with pytest.raises(KeyboardInterrupt):
            with stop.keep_sigterm():
                # what ray.init does first: its own handler for the whole process
                signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(signum))
                os.kill(os.getpid(), signal.SIGTERM)
                wait_for_signal()
        assert stop.received() == signal.SIGTERM
        assert signal.getsignal(signal.SIGTERM) is stop._on_signal  # ours again


def test_a_second_signal_exits_at_once_with_the_signal_code():
    script = """
import os, signal, time
from pipeline.cluster.stop import stop_on_signals
with stop_on_signals():
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(5)
    except KeyboardInterrupt:
        print("stopping", flush=True)
        os.kill(os.getpid(), signal.SIGINT)  # a cleanup that hangs: the second Ctrl-C ends it
        time.sleep(60)
"""
    started = time.monotonic()
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 130, out.stderr
    assert time.monotonic() - started < 30  # not the 60 s the cleanup would have taken
    assert out.stdout == "stopping\n"
    assert "SIGINT: stopping the run" in out.stderr and "Ctrl-C again stops at once" in out.stderr
    assert "SIGINT again: stopping now" in out.stderr


def test_a_second_sigterm_leaves_no_running_summary_with_a_dead_pid(tmp_path):
    """The stop's cleanup hangs, a second SIGTERM ends the process: its summary.json says
    stopped and how, not running with a pid that is gone."""
    script = f"""
import os, signal, time
from pathlib import Path
from pipeline.cluster.stop import at_once, stop_on_signals
from pipeline.job.rundir import RunDir
run = RunDir(Path({str(tmp_path)!r}))
run.write_running("job", 3, "pipeline run job.yaml --output {tmp_path}")
with stop_on_signals(), at_once(run.write_stopped_at_once):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except KeyboardInterrupt:
        os.kill(os.getpid(), signal.SIGTERM)  # the cleanup hangs; SIGTERM again
        time.sleep(60)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.returncode == 143, out.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["signal"] == "SIGTERM"
    assert summary["error"].startswith("stopped at once by a second SIGTERM")
    assert summary["resume"] == f"pipeline run job.yaml --output {tmp_path}"  # kept


def test_the_resume_command_reruns_the_same_config_into_the_same_directory():
    sets = ["train.epochs=3", "data.image_size=[16, 16]", "run.address=10.0.0.5:6379",
            "run.output=elsewhere"]
    command = resume_command("examples/quickstart.yaml", sets, Path("runs/q-1"))
    assert command == ("pipeline run examples/quickstart.yaml --set train.epochs=3 "
                       "--set 'data.image_size=[16, 16]' --address 10.0.0.5:6379 "
                       "--output runs/q-1")
    program, *argv = shlex.split(command)
    args = build_parser().parse_args(argv)  # the CLI reads it back as the same run
    assert program == "pipeline" and args.config == "examples/quickstart.yaml"
    assert args.overrides == ["train.epochs=3", "data.image_size=[16, 16]"]
    assert (args.address, args.output) == ("10.0.0.5:6379", "runs/q-1")
    assert resume_command({"run": {}}, sets, Path("runs/q-1")) is None  # no file to name


def test_the_console_says_where_it_stopped_and_how_to_resume():
    summary = {"status": "stopped", "epochs": 3, "epochs_done": 1,
               "checkpoint": "out/ray/train/checkpoint_1",
               "resumes_at": {"epoch": 2, "after_step": 0},
               "resume": "pipeline run q.yaml --output out"}
    assert stopped_lines(summary, signal.SIGTERM, "out") == [
        "stopped by SIGTERM after 1 of 3 epochs; last checkpoint out/ray/train/checkpoint_1 "
        "(resumes at epoch 2, after step 0)",
        "resume with: pipeline run q.yaml --output out"]
    fresh = summary | {"epochs_done": 0, "checkpoint": None, "resumes_at": None}
    assert "no checkpoint yet: rerunning starts from the beginning" in \
        stopped_lines(fresh, signal.SIGINT, "out")[0]
