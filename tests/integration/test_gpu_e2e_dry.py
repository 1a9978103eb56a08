"""benchmarks/gpu_e2e.sh runs whole on the CPU at a tiny size (GPU_E2E_DRY=1), so the script a
device session runs cannot rot between sessions (issue 27)."""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.bench
@pytest.mark.timeout(900)
def test_the_gpu_script_runs_every_step_dry(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "out"), GPU_E2E_DRY="1",
               GPU_E2E_WORK=str(tmp_path / "work"))
    env.pop("RAY_ADDRESS", None)  # every run starts its own local Ray, as on the device
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_e2e.sh")], env=env,
                          capture_output=True, text=True, timeout=880)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "gpu-e2e.json").read_text())
    assert result["dry"] and result["errors"] == {}
    assert set(result["seconds"]) == {"env", "train", "diagnosis", "h2d", "profile"}
    rows = {r["contender"]: r for r in result["train"]["rows"]}
    assert set(rows) == {"feedline", "raytrain", "ddp"}
    assert all(r["ok"] and r["samples"] for r in rows.values()), rows
    assert rows["feedline"]["feedline"]["status"] == "succeeded"
    assert set(result["diagnosis"]) == {"input_bound"}  # one injected run dry; three on the GPU
    for injected, run in result["diagnosis"].items():  # verdicts are the GPU run's to judge
        assert run["rc"] == 0 and run["verdict"], (injected, run)
    assert result["h2d"]["bandwidth"] and result["profile"]
    assert (tmp_path / "out" / "gpu-e2e.md").read_text().startswith("# GPU end-to-end check")
