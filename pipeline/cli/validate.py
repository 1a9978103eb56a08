"""``pipeline validate CONFIG [--set KEY=VALUE ...]``: print every config error, exit 2 on any.

After the config, the data source is checked as ``pipeline run`` checks it before starting Ray
(the path exists, class folders, parquet columns and types, labels), as seen from this machine.
"""

from __future__ import annotations

import argparse

from rich.console import Console
from rich.markup import escape

from pipeline.config import Config, ConfigError, load_config
from pipeline.config.root import read_yaml


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field, e.g. train.epochs=3")


def main(args: argparse.Namespace) -> int:
    from pipeline.api import check_source, check_task
    from pipeline.data import DigitsSource

    console = Console(stderr=True, soft_wrap=True)
    errors: list[str] = []
    try:
        config = load_config(args.config, args.overrides)
        checks = [check_source, lambda c, _: check_task(c)]
    except ConfigError as exc:  # the data is still checked when its own section is sound
        errors += exc.errors
        config, checks = _data_section(args), [check_source]
    for check in checks if config is not None else ():
        if check is check_source and isinstance(config.data.source, DigitsSource):
            continue  # the run writes those itself
        try:
            check(config, console)
        except ConfigError as exc:
            errors += exc.errors
    if errors:
        for line in errors:
            console.print(f"[red]error[/]: {escape(line)}", highlight=False)
        console.print(f"{args.config}: {len(errors)} error(s)")
        return 2
    Console().print(f"{args.config}: ok")
    return 0


def _data_section(args: argparse.Namespace) -> Config | None:
    """The config's ``data`` section alone (the rest default), or None when it has errors of
    its own (already listed)."""
    try:
        data = read_yaml(args.config).get("data", {})
        return load_config({"data": data}, [o for o in args.overrides if o.startswith("data.")])
    except ConfigError:
        return None
