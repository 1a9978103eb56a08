"""``pipeline run CONFIG [--set KEY=VALUE ...] [--address ADDR] [--output DIR]``."""

from __future__ import annotations

import argparse

from rich.console import Console
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
    keys = ("status", "epochs", "samples", "samples_per_second", "wall_seconds", "num_workers",
            "val_accuracy", "train_loss", "bad_samples", "backend", "ray_address", "checkpoint")
    for key in keys:
        value = summary.get(key)
        if value is None:
            continue
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    return table


def main(args: argparse.Namespace) -> int:
    from pipeline.api import run
    from pipeline.data.reader import BadSampleThresholdError
    from pipeline.train import PlanError

    console = Console(stderr=True, soft_wrap=True)
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f"run.address={args.address}")
    if args.output:
        overrides.append(f"run.output={args.output}")
    try:
        result = run(args.config, sets=overrides, console=console)
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]config error[/]: {line}")
        return 2
    except PlanError as exc:
        console.print(f"[red]plan refused[/]: {exc}")
        return 3
    except BadSampleThresholdError as exc:
        console.print(f"[red]run stopped[/]: {exc}")
        return 1
    Console().print(summary_table(result.summary))
    console.print(f"results in {result.output}")
    return 0
