"""The tree passes ruff (config in pyproject.toml), so style does not drift between commits."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_ruff_is_clean():
    ruff = shutil.which("ruff") or str(Path(sys.executable).parent / "ruff")
    if not Path(ruff).exists():
        pytest.skip("ruff is not installed (pip install -e '.[dev]')")
    out = subprocess.run([ruff, "check", str(ROOT)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout[-3000:]
