"""The ``pipeline`` command: run, validate, doctor, report, tune, bench.

The YAML file is the interface; the CLI selects a file and takes a few overrides. The flag set
is pinned by ``tests/unit/cli/test_cli_flags.py`` so it does not sprawl.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys

COMMANDS = {
    "run": ("pipeline.cli.run", "train a config on Ray (local, joined or embedded)"),
    "validate": ("pipeline.cli.validate", "check a config and print every error"),
    "doctor": ("pipeline.cli.doctor", "detect GPUs, RDMA and NICs on every node; advise NCCL env"),
    "report": ("pipeline.cli.report", "reprint a run's verdict and redraw its plot"),
    "tune": ("pipeline.cli.tune", "probe, diagnose, apply the advice, keep what measurably helps"),
}

BENCHMARKS = {
    "collective": ("pipeline.cli.bench_collective",
                   "all-reduce/all-gather/reduce-scatter bandwidth vs raw torch.distributed"),
    "ingest": ("pipeline.cli.bench_ingest",
               "Feedline's data path vs raw Ray Data, DataLoader and the ceiling"),
    "train": ("pipeline.cli.bench_train",
              "the whole training job, spawn to exit: pipeline run vs Ray Train vs plain DDP"),
    "scaling": ("pipeline.cli.bench_scaling",
                "one job at several worker counts: per-worker throughput and why it fell"),
}


def _add(sub, name: str, module: str, help_text: str) -> None:
    command = sub.add_parser(name, help=help_text, description=help_text)
    mod = importlib.import_module(module)
    mod.configure(command)
    command.set_defaults(handler=mod.main)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description="Feedline: keep GPUs fed.")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="debug logging; `run` also shows Ray's driver and worker log lines")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        _add(sub, name, module, help_text)
    bench = sub.add_parser("bench", help="benchmarks, side by side with their baselines")
    bench_sub = bench.add_subparsers(dest="benchmark", required=True)
    for name, (module, help_text) in BENCHMARKS.items():
        _add(bench_sub, name, module, help_text)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
