"""Training-job benchmark: ``pipeline run`` vs hand-written Ray Train vs plain DDP, spawn to exit.

The same as ``pipeline bench train`` (one implementation: :mod:`pipeline.bench.train`; the
baselines are ``train_raytrain.py`` and ``train_ddp.py`` beside this file, the job is
``configs/train_job.yaml``), plus a ``--save`` that writes the commit-ready pair into
``benchmarks/results/``::

    python benchmarks/train_job.py --quick               # 64 tiny images: checks the setup
    python benchmarks/train_job.py --save                # 3 epochs, 3 rounds
    python benchmarks/train_job.py --epochs 10 --save    # 10 epochs, 3 rounds

``--save`` writes ``benchmarks/results/train-job-e<epochs>-<date>.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.cli import bench_train  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    bench_train.configure(parser)
    parser.add_argument("--save", action="store_true",
                        help=f"write train-job-e<epochs>-<date>.json and .md into {RESULTS}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.save:
        epochs = args.epochs or (1 if args.quick else 3)
        stem = RESULTS / f"train-job-e{epochs}-{time.strftime('%Y-%m-%d')}"
        RESULTS.mkdir(parents=True, exist_ok=True)
        args.json = args.json or stem.with_suffix(".json")
        args.markdown = args.markdown or stem.with_suffix(".md")
    return bench_train.main(args)


if __name__ == "__main__":
    sys.exit(main())
