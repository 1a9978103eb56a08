"""The YAML file is the interface: this pins the CLI's flags so they do not sprawl."""

import argparse
import subprocess
import sys
from pathlib import Path

import yaml

from pipeline.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[3]

EXPECTED = {
    "run": {"config", "overrides", "address", "output"},
    "validate": {"config", "overrides"},
    "doctor": {"address", "root", "nccl_log", "json"},
    "report": {"run_dir"},
    "tune": {"config", "overrides", "budget_s", "max_trials", "output"},
    "bench collective": {"workers", "backend", "max_size", "json", "address"},
    "bench ingest": {"samples", "reps", "workers", "quick", "json", "markdown"},
    "bench train": {"epochs", "rounds", "samples", "cpus", "quick", "json", "markdown"},
    "bench scaling": {"config", "workers", "overrides", "address", "output", "json"},
}


def subcommands(parser):
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def test_flag_set_is_pinned():
    found = {}
    for name, command in subcommands(build_parser()).items():
        if name == "bench":
            for bench, sub in subcommands(command).items():
                found[f"bench {bench}"] = sub
        else:
            found[name] = command
    assert set(found) >= set(EXPECTED), sorted(found)
    for name, command in found.items():
        dests = {a.dest for a in command._actions if a.dest != "help"}
        assert dests == EXPECTED.get(name), f"pipeline {name} flags changed: {sorted(dests)}"


def test_validate_prints_every_error_and_exits_2(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("train: {epochs: 0, num_workrs: 2}\ntransfer: {gpu_prefetch: -1}\n")
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err
    assert "train.epochs (0) must be >= 1" in err
    assert "train.num_workrs: unknown field; did you mean num_workers?" in err
    assert "transfer.gpu_prefetch (-1) must be >= 1; use 1 to disable overlap" in err
    assert "3 error(s)" in err


def test_every_example_config_validates():
    for config in sorted((ROOT / "examples").glob("*.yaml")):
        if "provider" in yaml.safe_load(config.read_text()):
            continue  # a Ray cluster-launcher file, not a Feedline config
        assert main(["validate", str(config)]) == 0, config


def test_module_entry_point():
    out = subprocess.run([sys.executable, "-m", "pipeline", "--help"], capture_output=True,
                         text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0 and "validate" in out.stdout


def test_run_refuses_bad_config_before_starting_ray(tmp_path, capsys):
    config = tmp_path / "bad.yaml"
    config.write_text("data: {source: {kind: parquet}}\n")
    assert main(["run", str(config)]) == 2
    assert "data.source.path: required field is missing" in capsys.readouterr().err


def test_building_the_parser_imports_neither_torch_nor_ray():
    # a fresh interpreter: this test session has imported both; `pipeline --help` and a refused
    # config must not wait for them
    code = ("import sys; from pipeline.cli.main import build_parser; build_parser(); "
            "print(sorted({'torch', 'ray'} & set(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    assert out.strip() == "[]"
