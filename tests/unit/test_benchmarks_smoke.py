"""The torch-only benchmarks run end to end on CPU at a tiny size (tests/gpu covers CUDA)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def bench(tmp_path, script, *args):
    out = tmp_path / "out.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args, "--json",
                           str(out)], cwd=ROOT, timeout=240, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]  # what failed, not only that it did
    return json.loads(out.read_text())


@pytest.mark.timeout(300)
def test_h2d_reports_every_method(tmp_path):
    result = bench(tmp_path, "h2d.py", "--quick", "--device", "cpu", "--trials", "1",
                   "--parts", "bandwidth,handoff")
    rows = result["bandwidth"]
    assert {r["method"] for r in rows} == {"pageable", "ray_style", "pinned_reuse", "pool"}
    assert all(r["gbps"] > 0 and r["batch_ms"] > 0 for r in rows)
    handoff = result["handoff"]
    assert set(handoff["idle_us"]) == {"inline", "pool"} and handoff["fields"] == 3
    assert handoff["next_us_busy"]["median"] > 0


@pytest.mark.timeout(300)
def test_profile_overhead_with_ddp_sees_the_comm_hook(tmp_path):
    result = bench(tmp_path, "profile_overhead.py", "--parts", "ddp", "--device", "cpu",
                   "--quick", "--steps", "5", "--reps", "2")
    ddp = result["ddp"]
    assert ddp["world"] == 2 and ddp["backend"] == "gloo"
    assert ddp["buckets_per_step"] == [2.0, 2.0]  # the timed hook ran on every rank's buckets
    assert all(ms["comm_exposed"] > 0 for ms in ddp["profiled_phase_ms"])
    assert ddp["step_ms"]["off"]["median"] > 0 and ddp["step_ms"]["on"]["median"] > 0


def test_startup_reads_the_first_step_and_the_last_step_from_a_runs_breakdown():
    """benchmarks/startup.py's two edges, from the breakdown a 2-epoch ``pipeline run`` wrote
    (its rows as summary.json has them, seconds of a real run on 2 cores)."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import startup
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    rows = [("imports and config", 1.1), ("ray start", 3.5),
            ("driver set-up (plan, network, datasets)", 0.2),
            ("worker group start (Train controller, worker processes)", 2.8),
            ("worker process start-up (imports, Train's process group)", 6.2),
            ("worker set-up (model, DDP, dataset shards)", 1.4),
            ("epoch 1 start-up (first batch)", 3.6), ("epoch 1 steady training", 2.5),
            ("epoch 1 report, checkpoint and validation", 1.9),
            ("epoch 1 to 2 (between epochs)", 0.1), ("epoch 2 start-up (first batch)", 0.01),
            ("epoch 2 steady training", 1.2), ("epoch 2 report, checkpoint and validation", 0.4),
            ("fit teardown (last checkpoint, link probe, worker group)", 0.7),
            ("outputs (summary, profile, plots)", 0.7), ("ray shutdown", 0.0)]
    summary = {"samples": 2868, "breakdown": [{"phase": p, "seconds": s} for p, s in rows]}
    run = startup.measured("baseline", summary, wall=27.0, cpu=40.0)
    assert run["first_step_s"] == pytest.approx(18.8)
    assert run["last_step_to_exit_s"] == pytest.approx(27.0 - 24.51)
    assert run["phases"]["first batch"] == pytest.approx(3.6)
    assert run["phases"]["training"] == pytest.approx(6.11)  # epochs' rows after start-up


def test_startup_names_each_process_by_the_title_ray_gives_it():
    """--by-process: command lines as /proc shows them during a local run of Ray 2.60."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import startup
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    site = "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/ray"
    seen = {
        f"{site}/core/src/ray/gcs/gcs_server --log_dir=/tmp/ray/session_x/logs": "ray: gcs_server",
        f"{site}/core/src/ray/raylet/raylet --raylet_socket_name=/tmp/ray/s/sockets/raylet":
            "ray: raylet",
        f"/usr/bin/python {site}/dashboard/dashboard.py --host=127.0.0.1 --port=8265":
            "ray: dashboard",
        f"/usr/bin/python {site}/_private/workers/default_worker.py --node-ip-address=10.0.0.1 "
        "--raylet-name=/tmp/ray/s/sockets/raylet": "ray::IDLE",  # before Ray titles it
        "ray::RayTrainWorker.__init__": "ray::RayTrainWorker",
        "ray::MapBatches(decode)": "ray::MapBatches(decode)",
    }
    for line, title in seen.items():
        assert startup.title_of(line.split(" ")) == title, line
    runs = [{"by_process": {"ray::RayTrainWorker": [15.9, 2], "ray: raylet": [1.7, 1]}},
            {"by_process": {"ray::RayTrainWorker": [16.1, 2], "ray: raylet": [1.5, 1]}}]
    table = "\n".join(startup.by_process({"baseline": runs}, ["baseline"]))
    assert "| ray::RayTrainWorker | 16.0 (x2) |" in table and "| **all** | **17.6** |" in table
