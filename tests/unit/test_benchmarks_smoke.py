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
