"""Ctrl-C and SIGTERM stop ``pipeline run`` cleanly; rerunning the command it prints resumes the
run with every epoch accounted exactly once; after a SIGKILL of the driver the local Ray it
started goes within seconds and the rerun says what it found; a SIGTERM while Ray starts takes
all of it along (real processes, real signals).

The runs are real ``python -m pipeline run`` processes, one at a time; all but the joined one
start their own local Ray, which must be gone when they exit. Epochs stream from Ray Data
(``data.cache=off``) so that every epoch is mid-training work.
"""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from pipeline.procfs import stat

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
SETS = ("train.epochs=2", "data.cache=off")
EXIT_BOUND_S = 60  # from the signal to the process's exit: generous for a loaded 2-core machine


def start(out: Path, *sets: str, address: str = "", ray_tmpdir: str = "",
          env: dict | None = None) -> subprocess.Popen:
    argv = [sys.executable, "-m", "pipeline", "run", str(QUICKSTART), "--output", str(out)]
    argv += [a for s in (*SETS, *sets) for a in ("--set", s)]
    argv += ["--address", address] if address else []
    # a session of its own, as a shell gives a command: Ctrl-C reaches its whole process group
    with open(out.parent / f"{out.name}.log", "w") as log:
        return subprocess.Popen(argv, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, env=os.environ | (env or {}) | (
                                    {"RAY_TMPDIR": ray_tmpdir} if ray_tmpdir else {}))


def console(out: Path) -> str:
    return (out.parent / f"{out.name}.log").read_text()


def wait_for(proc: subprocess.Popen, out: Path, ready, what: str, timeout_s: float = 240):
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert proc.poll() is None, f"exited ({proc.returncode}) before {what}:\n{console(out)}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s} s:\n{console(out)}"
        time.sleep(0.2)


def epochs_done(out: Path) -> int:
    path = out / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def send(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """As a terminal does: Ctrl-C (SIGINT) to the whole foreground process group, SIGTERM
    (``kill``, a container stop) to the process."""
    if sig == signal.SIGINT:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)


def stop(proc: subprocess.Popen, sig: signal.Signals) -> float:
    """Send ``sig``; the seconds from then to the exit."""
    sent = time.monotonic()
    send(proc, sig)
    proc.wait(timeout=EXIT_BOUND_S * 2)
    return time.monotonic() - sent


def open_files(proc: Path):
    for fd in proc.joinpath("fd").iterdir():
        try:
            yield os.readlink(fd)
        except OSError:  # closed meanwhile
            continue


def run_processes(ray_tmpdir: str) -> list[str]:
    """The driver and everything of the Ray it started: the processes whose environment holds
    the run's own ``RAY_TMPDIR`` or that hold a file open under it (a process title can
    overwrite what ``/proc/PID/environ`` shows; Ray's processes all write logs there)."""
    marker = f"RAY_TMPDIR={ray_tmpdir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "environ").read_bytes().split(b"\0") or any(
                    f.startswith(f"{ray_tmpdir}/") for f in open_files(entry)):
                title = (entry / "cmdline").read_bytes().rstrip(b"\0")[:100]
                found.append(f"{entry.name} {stat(int(entry.name))} {title!r}")
        except OSError:  # gone meanwhile
            continue
    return found


def left_alive(ray_tmpdir: str, within_s: float = 20) -> list[str]:
    """The run's processes still alive ``within_s`` after it exited (none, when it is clean)."""
    deadline = time.monotonic() + within_s
    while (alive := run_processes(ray_tmpdir)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return alive


def watchdog_said(ray_tmpdir: str) -> str:
    return "".join(p.read_text() for p in Path(ray_tmpdir).rglob("feedline-watchdog.err"))


@pytest.fixture
def ray_tmpdir():
    """A Ray temp dir of the test's own (``RAY_TMPDIR``): its processes carry it in their
    environment. Short: Ray's socket paths have a length cap."""
    path = tempfile.mkdtemp(prefix="/tmp/fsg")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def snapshot(out: Path) -> Path:
    """Ray Train's record of the run's checkpoints: there once it registered the first."""
    return out / "ray" / "train" / "checkpoint_manager_snapshot.json"


def marker_pid(out: Path) -> int | None:
    """The pid a ``running`` summary names (None while it is being written)."""
    try:
        return summary_of(out).get("pid")
    except ValueError:
        return None


def summary_of(out: Path) -> dict:
    return json.loads((out / "summary.json").read_text())


@pytest.mark.timeout(420)
def test_ctrl_c_during_validation_keeps_the_epoch_and_the_printed_command_resumes_exactly_once(
        tmp_path, ray_tmpdir):
    out, mark = tmp_path / "out", tmp_path / "validating"
    task = "train.task=tests.integration.tasks_for_tests:FirstValidationWaits"
    # the task's first validation pass waits (a minute) once it has begun: Ctrl-C lands there
    proc = start(out, task, ray_tmpdir=ray_tmpdir, env={"FEEDLINE_TEST_MARK": str(mark)})
    wait_for(proc, out, mark.exists, "epoch 1's validation")
    # driver, GCS, raylet, workers
    assert len(run_processes(ray_tmpdir)) >= 4, run_processes(ray_tmpdir)

    took = stop(proc, signal.SIGINT)
    said = console(out)
    assert proc.returncode == 130, said
    assert took < EXIT_BOUND_S, took
    assert left_alive(ray_tmpdir) == [], watchdog_said(ray_tmpdir)
    summary = summary_of(out)
    assert summary["status"] == "stopped" and summary["signal"] == "SIGINT", summary
    # the epoch just trained is kept: checkpointed before its validation, its line written
    assert summary["epochs_done"] == 1 and summary["resumes_at"]["epoch"] == 2, summary
    assert Path(summary["checkpoint"]).is_dir()
    [line] = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert line["epoch"] == 1 and "val_accuracy" not in line, line
    command = shlex.join(["pipeline", "run", str(QUICKSTART), *(
        a for s in (*SETS, task) for a in ("--set", s)), "--output", str(out)])
    assert summary["resume"] == command
    assert "SIGINT: stopping the run" in said and f"resume with: {command}" in said
    assert "stopped by SIGINT after 1 of 2 epochs" in said
    assert "Traceback" not in said and "SystemExit" not in said
    # Ray's own driver lines went to the run directory, not to the console
    assert "Started a local Ray instance" not in said
    # nor Ray's workers' lines ("(RayTrainWorker pid=123) ...", "(MapWorker(...) pid=...")
    assert not re.search(r"^\S*\(\S+ pid=\d+", said, re.M), said
    assert "Started a local Ray instance" in (out / "ray-driver.log").read_text()

    program, *argv = shlex.split(summary["resume"])
    rerun = subprocess.run([sys.executable, "-m", program, *argv], cwd=ROOT, text=True,
                           capture_output=True, timeout=300,
                           env=os.environ | {"FEEDLINE_TEST_MARK": str(mark), "RAY_TMPDIR":
                                             ray_tmpdir})
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    # it gave the prompt back without waiting for Ray's shutdown: its watchdog stopped that Ray
    assert left_alive(ray_tmpdir) == [], watchdog_said(ray_tmpdir)
    assert "finished and left its Ray to the watchdog" in watchdog_said(ray_tmpdir)
    summary = summary_of(out)
    assert summary["status"] == "succeeded"
    [resumed] = summary["resumed_from"]
    assert resumed["epoch"] == 1  # not from the beginning
    assert summary["exactly_once"] is True
    assert [a["epoch"] for a in summary["accounting"]] == [1, 2]
    for epoch in summary["accounting"]:  # the epochs before the stop included
        assert (epoch["lost"], epoch["duplicated"]) == (0, 0), epoch
        assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]
    with np.load(out / "delivered.npz") as delivered:
        assert sorted(delivered.files) == [f"e{e}_rank{r}" for e in (1, 2) for r in (0, 1)]
    assert not (out / "delivered").exists()  # the per-epoch files went into delivered.npz
    assert [json.loads(x)["epoch"] for x in (out / "metrics.jsonl").read_text().splitlines()] \
        == [1, 2]


@pytest.mark.timeout(300)
def test_a_second_ctrl_c_stops_at_once_and_takes_the_local_ray_along(tmp_path, ray_tmpdir):
    out = tmp_path / "out"
    proc = start(out, ray_tmpdir=ray_tmpdir)
    wait_for(proc, out, lambda: (out / "ray" / "train").is_dir(), "training")
    assert len(run_processes(ray_tmpdir)) >= 4, run_processes(ray_tmpdir)

    send(proc, signal.SIGINT)
    # the user sees the first stop under way and presses again (two signals that arrive before
    # Python runs the handler once are one signal)
    wait_for(proc, out, lambda: "SIGINT: stopping the run" in console(out), "the first stop")
    took = stop(proc, signal.SIGINT)
    assert proc.returncode == 130, console(out)
    assert took < 10, took  # "at once": the Ray it started gets 3 s to go, no more
    assert "SIGINT again: stopping now" in console(out)
    assert left_alive(ray_tmpdir) == [], watchdog_said(ray_tmpdir)


@pytest.mark.timeout(420)
def test_sigkill_of_the_driver_takes_its_local_ray_along_and_the_rerun_says_what_it_found(
        tmp_path, ray_tmpdir):
    out = tmp_path / "out"
    proc = start(out, ray_tmpdir=ray_tmpdir)
    wait_for(proc, out, lambda: epochs_done(out) >= 1 and snapshot(out).exists(),
             "the first epoch's checkpoint")
    assert len(run_processes(ray_tmpdir)) >= 4, run_processes(ray_tmpdir)

    killed = time.monotonic()
    proc.kill()  # no handler runs: only the watchdog of the Ray it started is left to act
    proc.wait()
    # without the watchdog Ray's agents outlive the driver by minutes; with it, seconds (a
    # loaded 2-core machine has taken up to 26 s, typically under 10)
    assert left_alive(ray_tmpdir, within_s=30) == [], watchdog_said(ray_tmpdir)
    assert time.monotonic() - killed < 30
    said = watchdog_said(ray_tmpdir)
    assert f"driver {proc.pid} exited without stopping its Ray; terminated" in said, said
    assert summary_of(out)["status"] == "running"  # what the killed run left: it never knew

    # the rerun says what it found before it starts Ray; resuming itself is the Ctrl-C test's
    rerun = start(out, ray_tmpdir=ray_tmpdir)
    found = (f"the run there ended without a word (process {proc.pid} on "
             f"{socket.gethostname()} is gone: killed?); resuming from its last checkpoint "
             f"(epoch ")
    wait_for(rerun, out, lambda: found in " ".join(console(out).split())
             and marker_pid(out) == rerun.pid, "what it found, and its own marker")
    assert summary_of(out)["status"] == "running"
    assert stop(rerun, signal.SIGINT) < EXIT_BOUND_S and rerun.returncode == 130
    assert summary_of(out)["status"] == "stopped"
    assert left_alive(ray_tmpdir) == [], watchdog_said(ray_tmpdir)


@pytest.mark.timeout(300)
def test_sigterm_mid_epoch_stops_a_joined_run_and_leaves_the_cluster_up(ray_cluster, tmp_path):
    import ray

    free = ray.available_resources().get("CPU", 0)
    out = tmp_path / "out"
    proc = start(out, "train.checkpoint_every=5", address=ray_cluster)
    wait_for(proc, out, snapshot(out).exists, "a mid-epoch checkpoint")

    took = stop(proc, signal.SIGTERM)
    said = console(out)
    assert proc.returncode == 143, said
    assert took < EXIT_BOUND_S, took
    summary = summary_of(out)
    assert summary["status"] == "stopped" and summary["signal"] == "SIGTERM", summary
    assert summary["ray_address"] == ray_cluster and f"--address {ray_cluster}" in \
        summary["resume"]
    assert Path(summary["checkpoint"]).is_dir() and summary["resumes_at"]["after_step"] >= 0
    assert "SIGTERM: stopping the run" in said and "stopped by SIGTERM" in said
    # the cluster it joined is still up, and the run's Train workers and Ray Data actors are
    # gone: the CPUs they held are free again
    deadline = time.monotonic() + 30
    while ray.available_resources().get("CPU", 0) < free and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ray.available_resources().get("CPU", 0) >= free, ray.available_resources()


@pytest.mark.timeout(300)
def test_sigterm_while_ray_starts_leaves_nothing_of_it(tmp_path, ray_tmpdir):
    for attempt in range(3):  # the window is Ray's start, about 2 s: a late signal tries again
        out = tmp_path / f"out{attempt}"
        proc = start(out, ray_tmpdir=ray_tmpdir)
        # Ray's agents are up (the raylet starts them), and the driver has not said it runs yet
        wait_for(proc, out, lambda: any("Agent" in p for p in run_processes(ray_tmpdir)),
                 "Ray's agents", 120)
        took = stop(proc, signal.SIGTERM)
        said = console(out)
        if "cluster at" not in said:
            break
        assert left_alive(ray_tmpdir) == [], watchdog_said(ray_tmpdir)
    assert "cluster at" not in said, "each signal came after Ray had started"
    assert proc.returncode == 143, said
    assert took < EXIT_BOUND_S, took
    # Ray's agents outlive their raylet by a minute unless the stop takes them along
    assert left_alive(ray_tmpdir, within_s=10) == [], said
    assert summary_of(out)["status"] == "stopped", summary_of(out)
