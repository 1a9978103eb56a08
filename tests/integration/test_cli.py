"""CLI commands against the session's Ray: scaling bench, report regenerating from a run."""

import json
from pathlib import Path

import pytest

from pipeline.cli.main import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(400)
def test_bench_scaling_and_report(ray_cluster, tmp_path, capsys):
    report = tmp_path / "scaling.json"
    assert main(["bench", "scaling", str(ROOT / "examples/quickstart.yaml"), "--workers", "1,2",
                 "--set", "train.epochs=1", "--output", str(tmp_path / "runs"),
                 "--json", str(report)]) == 0
    data = json.loads(report.read_text())
    assert [r["workers"] for r in data["runs"]] == [1, 2]
    assert data["runs"][0]["efficiency"] == 1.0 and data["runs"][1]["efficiency"] > 0
    assert "2 worker(s):" in capsys.readouterr().out

    run_dir = tmp_path / "runs" / "workers-2"
    (run_dir / "breakdown.png").unlink()
    assert main(["report", str(run_dir)]) == 0
    assert (run_dir / "breakdown.png").stat().st_size > 10_000
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["diagnosis"]["verdict"] in capsys.readouterr().out
