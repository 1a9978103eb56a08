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


@pytest.mark.timeout(300)
def test_run_counts_and_lists_the_files_it_does_not_read(ray_cluster, tmp_path, capsys):
    from tests.integration.test_run import write_images

    folder = write_images(tmp_path / "imgs", 20)
    (folder / "notes.txt").write_text("beside the class folders")
    (folder / "0" / ".DS_Store").write_bytes(b"\0")
    (folder / "1" / "photo.webp").write_bytes(b"RIFF")
    out = tmp_path / "out"
    assert main(["run", str(ROOT / "examples/quickstart.yaml"), "--address", ray_cluster,
                 "--set", "data.source.kind=image_folder", "--set", f"data.source.path={folder}",
                 "--set", "data.image_size=[16, 16]", "--set", "train.epochs=1",
                 "--output", str(out)]) == 0
    err = capsys.readouterr().err
    assert (f"warning: 3 file(s) under {folder} are not read: 1 at the root, not in a class "
            f"folder (e.g. {folder / 'notes.txt'}); 2 not .png/.jpg/.jpeg") in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "succeeded"
    assert summary["data"]["num_train"] + summary["data"]["num_val"] == 40
    assert summary["skipped_files"] == 3
    assert {s["path"]: s["reason"] for s in summary["skipped"]} == {
        str(folder / "notes.txt"): "at the root, not in a class folder",
        str(folder / "0" / ".DS_Store"): "not .png/.jpg/.jpeg",
        str(folder / "1" / "photo.webp"): "not .png/.jpg/.jpeg",
    }
