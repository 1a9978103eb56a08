"""``pipeline validate CONFIG [--set KEY=VALUE ...]``: print every config error, exit 2 on any.

After the config, the data source is checked as ``pipeline run`` checks it before starting Ray
(the path exists, class folders, parquet columns and types, labels), as seen from this machine.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from pipeline.config import ConfigError, load_config


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field, e.g. train.epochs=3")


def main(args: argparse.Namespace) -> int:
    from pipeline.api import check_source, check_task
    from pipeline.data import DigitsSource

    console = Console(stderr=True, soft_wrap=True)
    try:
        config = load_config(args.config, args.overrides)
        if not isinstance(config.data.source, DigitsSource):  # the run writes those itself
            check_source(config, console)
        check_task(config)
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]error[/]: {escape(line)}", highlight=False)
        console.print(f"{args.config}: {len(exc.errors)} error(s)")
        return 2
    Console().print(f"{args.config}: ok")
    return 0
