"""``pipeline.run`` refuses a run directory that holds a finished run, before starting Ray."""

import json
from pathlib import Path

import pytest

import pipeline
from pipeline.config import ConfigError

QUICKSTART = Path(__file__).resolve().parents[2] / "examples/quickstart.yaml"


def test_a_finished_run_directory_is_refused(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "succeeded"}))
    with pytest.raises(ConfigError, match=r"run.output .* already holds a finished run"):
        pipeline.run(QUICKSTART, sets=[f"run.output={tmp_path}"])


def test_a_missing_resume_checkpoint_names_the_field(tmp_path):
    with pytest.raises(ConfigError, match=r"train.resume_from .* not a checkpoint folder"):
        pipeline.run(QUICKSTART, sets=[f"train.resume_from={tmp_path}"])
