"""`ray job submit` of the quickstart to a `ray start --head` cluster this test starts and stops.

The cluster lives in its own temp dir, on loopback, with its own token (Ray 2.60 turns token
authentication on by default); the test stops it by killing exactly the processes of that temp
dir, never with `ray stop`, which would kill every Ray on the machine.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def processes_mentioning(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if marker in cmdline:
            pids.append(int(entry.name))
    return pids


def stop_cluster(temp_dir: str) -> None:
    # a throwaway cluster: a few seconds' grace, then SIGKILL (a process of it that ignores
    # SIGTERM held this teardown 15 s)
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 15)):
        for pid in processes_mentioning(temp_dir):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while processes_mentioning(temp_dir) and time.monotonic() < deadline:
            time.sleep(0.5)


@pytest.fixture(scope="module")
def head_cluster(tmp_path_factory):
    temp_dir = tempfile.mkdtemp(prefix="/tmp/flr")  # short: Ray's socket paths have a length cap
    token = tmp_path_factory.mktemp("auth") / "auth_token"
    token.write_text(uuid.uuid4().hex)
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token),
               PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    env.pop("RAY_ADDRESS", None)
    port, dashboard = free_port(), free_port()
    ray = str(Path(sys.executable).parent / "ray")
    try:
        subprocess.run(
            [ray, "start", "--head", "--node-ip-address=127.0.0.1", f"--port={port}",
             "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}", "--num-cpus=4",
             f"--temp-dir={temp_dir}", "--disable-usage-stats", "--include-dashboard=true",
             # every port of its own: another Ray on this machine (the test session's) may hold
             # the defaults, and a job agent that cannot bind never accepts a job
             *(f"--{name}={free_port()}" for name in (
                 "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
                 "metrics-export-port", "runtime-env-agent-port", "ray-client-server-port"))],
            env=env, check=True, timeout=120, capture_output=True, text=True)
        yield f"http://127.0.0.1:{dashboard}", env
    finally:
        stop_cluster(temp_dir)


@pytest.mark.timeout(600)
def test_ray_job_submit_runs_the_quickstart(head_cluster, tmp_path):
    address, env = head_cluster
    out = tmp_path / "run"
    ray = str(Path(sys.executable).parent / "ray")
    submit = [ray, "job", "submit", "--address", address, "--no-wait", "--working-dir", str(ROOT),
              "--runtime-env-json", json.dumps({"excludes": ["runs/", ".git/", "*.egg-info/"]}),
              "--", "python", "-m", "pipeline", "run", "examples/quickstart.yaml",
              "--set", "train.epochs=1", "--output", str(out)]
    deadline = time.monotonic() + 120
    while True:  # the head's job agent comes up a few seconds after `ray start` returns
        submitted = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=120)
        if submitted.returncode == 0 or "No available agent" not in submitted.stderr:
            break
        assert time.monotonic() < deadline, "the job agent never came up"
        time.sleep(2)
    assert submitted.returncode == 0, submitted.stderr[-3000:]
    job_id = re.search(r"raysubmit_[A-Za-z0-9]+", submitted.stdout).group(0)
    deadline = time.monotonic() + 480
    status = ""
    while time.monotonic() < deadline:
        polled = subprocess.run([ray, "job", "status", "--address", address, job_id], env=env,
                                capture_output=True, text=True, timeout=60)
        status = (polled.stdout + polled.stderr).lower()  # the CLI logs "Job '...' succeeded"
        if any(f"' {s}" in status for s in ("succeeded", "failed", "stopped")):
            break
        time.sleep(3)
    logs = subprocess.run([ray, "job", "logs", "--address", address, job_id], env=env,
                          capture_output=True, text=True, timeout=60).stdout
    assert "' succeeded" in status, logs[-4000:]
    assert f"writing {out}" in logs  # the job's logs say where its output lands
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["epochs"] == 1


def test_submitting_without_the_token_is_refused(head_cluster):
    address, env = head_cluster
    env = {k: v for k, v in env.items() if not k.startswith("RAY_AUTH_TOKEN")}
    env["RAY_AUTH_TOKEN"] = "not-the-token"
    ray = str(Path(sys.executable).parent / "ray")
    out = subprocess.run([ray, "job", "list", "--address", address], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    # refused for the token (Ray's 403 message), not for any other reason a command can fail
    said = (out.stdout + out.stderr).lower()
    assert "invalid authentication token" in said or "token is invalid" in said, said[-3000:]
