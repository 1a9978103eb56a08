"""Data that cannot train is refused before Ray starts: exit 2 in seconds, naming the field, the
value and the remedy, from ``pipeline run`` and ``pipeline validate`` alike.

In this process ``ray.init`` raises (tests/unit/conftest.py), so a refusal that came after
Ray's start would fail these tests with that error instead of exiting 2."""

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.cli.main import main
from tests.unit.data.conftest import write_folder

ROOT = Path(__file__).resolve().parents[3]
QUICKSTART = str(ROOT / "examples/quickstart.yaml")


def parquet_folder(root: Path) -> Path:
    """Four files; the third lacks a feature column."""
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(4):
        columns = {"f1": rng.normal(size=8), "f2": rng.normal(size=8), "label": np.arange(8) % 2}
        if i == 2:
            del columns["f2"]
        pq.write_table(pa.table(columns), root / f"part{i}.parquet")
    return root


def source(kind: str, path: Path) -> list[str]:
    return ["--set", f"data.source.kind={kind}", "--set", f"data.source.path={path}"]


@pytest.mark.parametrize("command", ["run", "validate"])
def test_a_missing_source_path_is_refused_before_ray(tmp_path, capsys, command):
    missing = tmp_path / "no-such-folder"
    args = [command, QUICKSTART, *source("image_folder", missing)]
    if command == "run":
        args += ["--output", str(tmp_path / "out")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert f"data.source.path ({str(missing)!r}) does not exist; point it at a folder" in err
    assert not (tmp_path / "out").exists()  # nothing written for a run that never started


def test_one_class_is_refused_by_run_and_by_validate(tmp_path, capsys):
    folder = write_folder(tmp_path / "imgs", classes=("cat",))
    message = (f"data.source.path ({str(folder)!r}) has one class folder ('cat'); a classifier "
               f"needs at least two: add a sub-folder per class")
    assert main(["validate", QUICKSTART, *source("image_folder", folder)]) == 2
    assert message in capsys.readouterr().err
    assert main(["run", QUICKSTART, *source("image_folder", folder),
                 "--output", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


def test_validate_lists_the_field_errors_and_the_data_error_together(tmp_path, capsys):
    missing = tmp_path / "no-such-folder"
    assert main(["validate", QUICKSTART, *source("image_folder", missing),
                 "--set", "train.epochs=0", "--set", "train.lr=fast"]) == 2
    err = capsys.readouterr().err
    assert "train.epochs" in err and "train.lr" in err
    assert f"data.source.path ({str(missing)!r}) does not exist" in err
    assert "3 error(s)" in err


def test_validate_warns_about_files_it_will_not_read(tmp_path, capsys):
    folder = write_folder(tmp_path / "imgs")
    (folder / "cat" / "notes.txt").write_text("not an image")
    assert main(["validate", QUICKSTART, *source("image_folder", folder)]) == 0
    captured = capsys.readouterr()
    assert f"warning: 1 file(s) under {folder} are not read: 1 not .png/.jpg/.jpeg" in captured.err
    assert "ok" in captured.out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", ["run", "validate"])
def test_the_command_exits_2_in_seconds_naming_the_bad_file(tmp_path, command):
    """The real entry point on real files: no traceback, no Ray, the file and the remedy."""
    folder = parquet_folder(tmp_path / "features")
    args = [sys.executable, "-m", "pipeline", command, QUICKSTART, *source("parquet", folder),
            "--set", "train.model=mlp"]
    if command == "run":
        args += ["--output", str(tmp_path / "out")]
    start = time.monotonic()
    out = subprocess.run(args, capture_output=True, text=True, timeout=100, cwd=ROOT)
    elapsed = time.monotonic() - start
    assert out.returncode == 2, out.stderr[-2000:]
    assert (f"data.source.features: {folder / 'part2.parquet'} lacks column(s) ['f2']; its "
            f"columns are ['f1', 'label']: add them, or list only shared columns in "
            f"data.source.features") in out.stderr
    assert "Traceback" not in out.stderr
    assert "Started a local Ray instance" not in out.stderr and "ray:" not in out.stderr
    assert elapsed < 30, f"took {elapsed:.0f} s: imports only, no Ray start, should be seconds"


@pytest.mark.timeout(120)
def test_a_malformed_set_names_the_set_from_the_real_command(tmp_path):
    out = subprocess.run([sys.executable, "-m", "pipeline", "run", QUICKSTART,
                          "--set", "train.epochs=[1,", "--output", str(tmp_path / "out")],
                         capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "config error: --set 'train.epochs=[1,': the value '[1,' is not valid YAML" in out.stderr
    assert "Traceback" not in out.stderr
