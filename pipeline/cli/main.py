"""The ``pipeline`` command: run, validate, doctor, bench, report.

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
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipeline", description="Feedline: keep GPUs fed.")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        command = sub.add_parser(name, help=help_text, description=help_text)
        mod = importlib.import_module(module)
        mod.configure(command)
        command.set_defaults(handler=mod.main)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s")
    return args.handler(args)


if __name__ == "__main__":
    sys.exit(main())
