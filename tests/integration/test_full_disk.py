"""A run folder on a disk that fills up: the run fails at once with exit 6 and one message that
names the folder and the remedy, its summary says why, and once there is room the same command
reruns into the folder and accounts every epoch exactly once (real processes, a real tmpfs)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.yaml"
# config.yaml, the running summary and Ray's driver log fit; the first epoch's ids and
# checkpoint do not
SMALL, ROOMY = "400k", "20m"


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own (needs root, as this machine's CI runs)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SMALL}", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def run(out: Path, address: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pipeline", "run", str(QUICKSTART),
                           "--set", "train.epochs=1", "--address", address, "--output", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=240)


@pytest.mark.timeout(600)
def test_a_full_disk_fails_the_run_in_one_line_and_a_rerun_with_room_resumes(small_disk,
                                                                            ray_cluster):
    out = small_disk / "run"
    first = run(out, ray_cluster)
    said = first.stderr
    assert first.returncode == 6, said[-4000:]
    assert f"cannot write: cannot write the run folder {out} (No space left on device" in said
    assert "free space on its disk or choose another run.output" in said
    assert "Traceback" not in said and "Logging error" not in said, said[-4000:]
    summary = json.loads((out / "summary.json").read_text())  # strict JSON, and says why
    assert summary["status"] == "failed" and "OutputWriteError" in summary["error"], summary
    assert not list(out.glob(".*.tmp")), list(out.iterdir())  # no half-written files

    subprocess.run(["mount", "-o", f"remount,size={ROOMY}", str(small_disk)], check=True)
    rerun = run(out, ray_cluster)
    assert rerun.returncode == 0, rerun.stderr[-4000:]
    assert "the run there failed (OutputWriteError" in " ".join(rerun.stderr.split())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "succeeded" and summary["exactly_once"] is True, summary
    assert [a["epoch"] for a in summary["accounting"]] == [1]
