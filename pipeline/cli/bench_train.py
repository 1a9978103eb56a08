"""``pipeline bench train``: the whole training job, Feedline beside Ray Train and plain DDP.

Each contender runs as its own process (its own local Ray where it uses Ray) and is timed from
spawn to exit; rounds rotate the order; the table shows medians (min-max), Feedline's speed
ratio to each baseline and every contender's final train loss. ``--quick`` is a tiny smoke run.
Run it on a quiet machine: other jobs on the cores change every number.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

QUICK = {"samples": 64, "source_size": (32, 32), "image_size": (16, 16), "epochs": 1,
         "rounds": 1}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--epochs", type=int, default=None,
                        help="training epochs of every contender (default 3; 1 with --quick)")
    parser.add_argument("--rounds", type=int, default=None,
                        help="rounds, contender order rotated each (default 3; 1 with --quick)")
    parser.add_argument("--samples", type=int, default=None,
                        help="JPEGs 256x256 written once (default 2048; 64 of 32x32 with --quick)")
    parser.add_argument("--cpus", type=int, default=0,
                        help="CPUs every contender gets: Ray's num_cpus, and the cores all "
                             "contenders are pinned to when fewer than the machine's "
                             "(default: every core)")
    parser.add_argument("--quick", action="store_true",
                        help="64 tiny images, 1 epoch, 1 round: checks the setup")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run and the summary as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                        help="also write the report as Markdown")


def bench_config(args: argparse.Namespace):
    """The benchmark config the flags select (validated; errors name the flag)."""
    from pipeline.bench.train import TrainBenchConfig

    values = dict(QUICK) if args.quick else {}
    for flag in ("epochs", "rounds", "samples"):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{flag} ({value}) must be >= 1")
            values[flag] = value
    if args.cpus < 0:
        raise ValueError(f"--cpus ({args.cpus}) must be >= 0; 0 uses every core")
    config = TrainBenchConfig(cpus=args.cpus, **values)
    errors = config.check()
    if errors:
        raise ValueError("; ".join(errors))
    return config


def tables(result: dict) -> list[Table]:
    from pipeline.bench.train_report import BREAKDOWN, HEADLINE, breakdown_rows, headline_rows

    job = result["job"]
    head = Table(title=f"Training job end to end: {job['epochs']} epochs, "
                       f"{result['config']['rounds']} rounds, {job['cpus']} CPUs each")
    for column in HEADLINE:
        head.add_column(column)
    for row in headline_rows(result):
        head.add_row(*row)
    out = [head]
    rows = breakdown_rows(result)
    if rows:
        detail = Table(title="what each contender reported about itself")
        for column in BREAKDOWN:
            detail.add_column(column)
        for row in rows:
            detail.add_row(*row)
        out.append(detail)
    return out


def main(args: argparse.Namespace) -> int:
    from pipeline.bench.train import run_train_bench
    from pipeline.bench.train_report import to_markdown

    console = Console()
    result = run_train_bench(bench_config(args),
                             progress=lambda msg: console.print(f"[dim]{msg}[/]"))
    for table in tables(result):
        console.print(table)
    for target in result["targets"]:
        mark = "[green]met[/]" if target["met"] else "[red]MISSED[/]"
        console.print(f"{target['target']}: {target['value']:.2f}x {mark}")
    for run in result["runs"]:
        if not run["ok"]:
            console.print(f"[red]{run['contender']} failed[/] (exit {run['rc']}), "
                          f"log {run['log']}:")
            console.print(run["log_tail"], markup=False, highlight=False)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(to_markdown(result))
    return 0 if all(run["ok"] for run in result["runs"]) else 1
