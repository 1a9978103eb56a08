"""The README's two commands are what CI runs, and importing pipeline has no side effects."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands():
    blocks = re.findall(r"```bash\n(.*?)\n```", (ROOT / "README.md").read_text(), re.S)
    return blocks[0].strip(), blocks[1].strip()


def test_readme_opens_with_install_run_and_test_commands():
    install_and_run, test = readme_commands()
    assert install_and_run.startswith("pip install torch==2.13.0 ")
    assert "pipeline run examples/quickstart.yaml" in install_and_run
    ci = (ROOT / ".ci" / "run").read_text()
    install = install_and_run.split(" && ")[0]
    assert f"\n{install}\n" in ci, "CI must perform the README's install"
    assert f"\n{test}\n" in ci, "CI must call exactly the README's test command"


def test_import_has_no_side_effects():
    code = ("import os, sys; before = dict(os.environ); import pipeline, pipeline.config; "
            "assert 'ray' not in sys.modules and 'torch' not in sys.modules, sys.modules.keys(); "
            "assert dict(os.environ) == before; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr
