"""``pipeline bench ingest``: Feedline's data path beside tuned raw Ray Data, DataLoader and the
ceiling, end to end over 1 and 3 epochs, every result physically checked.

Every contender decodes the same synthetic JPEGs to the same uint8 bytes with the same worker
count, batch and prefetch; the order rotates every repetition; the table shows medians
(min-max), INVALID rows with their reasons, and Feedline's ratios to each baseline.
``--quick`` is a seconds-long smoke run. The benchmark joins a running Ray (``RAY_ADDRESS`` or an
initialised one) or starts a local Ray and stops only that one; the physical check needs the
latter (Ray's workers must be this process's descendants to be measured).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from rich.console import Console

QUICK = {"samples": 128, "source_size": (64, 64), "image_size": (32, 32), "batch_size": 32,
         "reps": 1}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=None,
                        help="images per epoch (default 2048; 128 with --quick)")
    parser.add_argument("--reps", type=int, default=None,
                        help="repetitions, order rotated (default 5; 1 with --quick)")
    parser.add_argument("--workers", type=int, default=0,
                        help="decode processes/actors per contender (default: every core)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny images and one repetition: checks the setup in a minute")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run, the summary and the verdicts as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                        help="also write the report as Markdown")


def bench_config(args: argparse.Namespace):
    """The benchmark config the flags select (validated; errors name the flag)."""
    from pipeline.bench.ingest import IngestBenchConfig

    values = dict(QUICK) if args.quick else {}
    for flag in ("samples", "reps"):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{flag} ({value}) must be >= 1")
            values[flag] = value
    if args.workers < 0:
        raise ValueError(f"--workers ({args.workers}) must be >= 0; 0 uses every core")
    config = IngestBenchConfig(workers=args.workers, **values)
    errors = config.check()
    if errors:
        raise ValueError("; ".join(errors))
    return config


def main(args: argparse.Namespace) -> int:
    from pipeline.bench.ingest import run_ingest_bench
    from pipeline.bench.ingest_report import print_console, to_markdown

    # a log file has no width: do not squeeze the table into 80 columns there
    console = Console(width=None if sys.stdout.isatty() else 132)
    config = bench_config(args)
    if not logging.getLogger().isEnabledFor(logging.INFO):
        import ray.data  # noqa: F401  # configures its loggers on import: override after

        # Ray Data announces every dataset execution at INFO; the progress lines say enough.
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    result = run_ingest_bench(config, progress=lambda msg: console.print(f"[dim]{msg}[/]"))
    print_console(result, console)
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(to_markdown(result))
    return 0
