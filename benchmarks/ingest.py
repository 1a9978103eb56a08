"""Ingest benchmark: Feedline vs tuned raw Ray Data, DataLoader and the ceiling, end to end.

The same as ``pipeline bench ingest`` (one implementation: :mod:`pipeline.bench.ingest`),
plus a ``--save`` that writes the commit-ready pair into ``benchmarks/results/``::

    python benchmarks/ingest.py --quick            # about a minute: checks the setup
    python benchmarks/ingest.py --save             # 5 rotated reps, ~25 min on 2 cores
    python benchmarks/ingest.py --workers 8 --json out.json

``--save`` writes ``benchmarks/results/ingest-<date>.json`` and ``.md`` with the machine
description (nproc, CPU model, RAM, load average, versions).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.cli import bench_ingest  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench_ingest.configure(parser)
    parser.add_argument("--save", action="store_true",
                        help=f"write ingest-<date>.json and .md into {RESULTS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.save:
        stem = RESULTS / f"ingest-{time.strftime('%Y-%m-%d')}"
        RESULTS.mkdir(parents=True, exist_ok=True)
        args.json = args.json or stem.with_suffix(".json")
        args.markdown = args.markdown or stem.with_suffix(".md")
    return bench_ingest.main(args)


if __name__ == "__main__":
    sys.exit(main())
