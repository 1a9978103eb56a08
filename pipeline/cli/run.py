"""``pipeline run CONFIG [--set KEY=VALUE ...] [--address ADDR] [--output DIR]``."""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.config import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field, e.g. train.epochs=3")
    parser.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else local)")
    parser.add_argument("--output", help="run directory (default runs/<name>-<timestamp>)")


def summary_table(summary: dict) -> Table:
    table = Table(title="Feedline run", show_header=False)
    keys = ("status", "epochs", "samples", "samples_per_second", "steady_samples_per_second",
            "wall_seconds", "num_workers",
            "val_accuracy", "train_loss", "bad_samples", "skipped_files", "backend", "ray_address",
            "checkpoint")
    for key in keys:
        value = summary.get(key)
        if value is None:
            continue
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    return table


def breakdown_table(rows: list[dict]) -> Table:
    table = Table(title="Where the wall time went (process start to exit)")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for row in rows:
        table.add_row(row["phase"], f"{row['seconds']:.2f}", f"{row['share']:.1%}")
    return table


def main(args: argparse.Namespace) -> int:
    from pipeline.api import run
    from pipeline.data.reader import BadSampleThresholdError
    from pipeline.train import PlanError
    from pipeline.train.breakdown import JobClock, process_start

    console = Console(stderr=True, soft_wrap=True)
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f"run.address={args.address}")
    if args.output:
        overrides.append(f"run.output={args.output}")
    try:
        # timed from process start: imports and Ray's start are part of what the user waits for
        result = run(args.config, sets=overrides, console=console,
                     clock=JobClock(process_start()))
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]config error[/]: {escape(line)}", highlight=False)
        return 2
    except PlanError as exc:
        console.print(f"[red]plan refused[/]: {exc}")
        return 3
    except BadSampleThresholdError as exc:
        console.print(f"[red]run stopped[/]: {exc}")
        return 1
    except ConnectionError as exc:  # the cluster at run.address never answered
        console.print(f"[red]cluster unreachable[/]: {escape(str(exc))}", highlight=False)
        return 4
    Console().print(summary_table(result.summary))
    Console().print(breakdown_table(result.summary.get("breakdown", [])))
    console.print(f"results in {result.output}")
    return 0
