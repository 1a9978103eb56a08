"""``pipeline validate CONFIG [--set KEY=VALUE ...]``: print every config error, exit 2 on any."""

from __future__ import annotations

import argparse

from rich.console import Console

from pipeline.config import ConfigError, load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field, e.g. train.epochs=3")


def main(args: argparse.Namespace) -> int:
    console = Console(stderr=True, soft_wrap=True)
    try:
        load_config(args.config, args.overrides)
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]error[/]: {line}", highlight=False)
        console.print(f"{args.config}: {len(exc.errors)} error(s)")
        return 2
    Console().print(f"{args.config}: ok")
    return 0
