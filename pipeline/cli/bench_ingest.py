"""``pipeline bench ingest``: Feedline's data path beside raw Ray Data, DataLoader and the ceiling.

Every contender decodes the same synthetic JPEGs with the same function; repetitions are
interleaved; the table shows medians (min-max) per regime and Feedline's ratios to each
baseline, and ends with the issue's targets. ``--quick`` is a seconds-long smoke run. The
benchmark joins a running Ray (``RAY_ADDRESS`` or an initialised one) or starts a local Ray and
stops only that one.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from rich.console import Console
from rich.markdown import Markdown

QUICK = {"samples": 256, "source_size": (64, 64), "image_size": (32, 32), "batch_size": 32,
         "reps": 1}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--samples", type=int, default=None,
                        help="images per pass (default 4096; 256 with --quick)")
    parser.add_argument("--reps", type=int, default=None,
                        help="interleaved repetitions (default 5; 1 with --quick)")
    parser.add_argument("--workers", type=int, default=0,
                        help="decode processes/actors per contender (default: CPU count)")
    parser.add_argument("--quick", action="store_true",
                        help="tiny images and one repetition: checks the setup in seconds")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write every run and the summary as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="FILE",
                        help="also write the report as Markdown")


def bench_config(args: argparse.Namespace):
    """The benchmark config the flags select (validated; errors name the flag)."""
    from pipeline.data.ingest_bench import IngestBenchConfig

    values = dict(QUICK) if args.quick else {}
    for flag in ("samples", "reps"):
        value = getattr(args, flag)
        if value is not None:
            if value < 1:
                raise ValueError(f"--{flag} ({value}) must be >= 1")
            values[flag] = value
    if args.workers < 0:
        raise ValueError(f"--workers ({args.workers}) must be >= 0; 0 uses every CPU")
    config = IngestBenchConfig(workers=args.workers, **values)
    errors = config.check()
    if errors:
        raise ValueError("; ".join(errors))
    return config


def main(args: argparse.Namespace) -> int:
    from pipeline.data.ingest_bench import run_ingest_bench
    from pipeline.data.ingest_report import to_markdown

    console = Console()
    config = bench_config(args)
    if not logging.getLogger().isEnabledFor(logging.INFO):
        # Ray Data announces every dataset execution at INFO; the progress lines say enough.
        logging.getLogger("ray.data").setLevel(logging.WARNING)
    result = run_ingest_bench(config, progress=lambda msg: console.print(f"[dim]{msg}[/]"))
    report = to_markdown(result)
    console.print(Markdown(report))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))
    if args.markdown:
        args.markdown.write_text(report)
    return 0
