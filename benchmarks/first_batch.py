"""How long a streamed epoch waits for its first batch, by Ray Data block size.

Feedline's data path alone (no training): the configured source through ``build_datasets``, an
equal ``streaming_split`` into two consumer threads as Ray Train hands it to two workers, two
epochs; prints each consumer's first-batch and end-of-pass seconds::

    python benchmarks/first_batch.py --batches-per-block 4 --slow    # 10 ms per sample
    python benchmarks/first_batch.py --batches-per-block 1 --slow
    python benchmarks/first_batch.py --config benchmarks/configs/train_job.yaml \\
        --set data.source.path=~/.cache/feedline/bench-train/jpeg-n2048-256x256-c10-s0
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # Ray workers inherit the driver's path: the transform imports


def consume(shard, rank: int, marks: dict[str, float], start: float) -> None:
    """One trainer's pass: when its first batch came and when the pass ended."""
    for i, _ in enumerate(shard.iter_batches(batch_size=32, prefetch_batches=2)):
        if i == 0:
            marks[f"first batch, rank {rank}"] = time.perf_counter() - start
    marks[f"pass done, rank {rank}"] = time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "examples/quickstart.yaml"))
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--concurrency", default="[1, 1]")
    parser.add_argument("--batches-per-block", type=int, default=None,
                        help="override pipeline.data.dataset.BATCHES_PER_BLOCK")
    parser.add_argument("--slow", action="store_true",
                        help="add the 10 ms per sample transform of the tune benchmark")
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args(argv)
    import ray

    import pipeline.data.dataset as dataset
    from pipeline.config import load_config

    if args.batches_per_block:
        dataset.BATCHES_PER_BLOCK = args.batches_per_block
    sets = [*args.sets, f"data.concurrency={args.concurrency}"]
    if args.slow:
        sets.append("data.transform=tests.integration.tune_transforms:slow_decode")
    config = load_config(args.config, sets)
    ray.init(num_cpus=8, include_dashboard=False, log_to_driver=False)
    plan = dataset.build_datasets(config.data, ship_uint8=True)
    shards = plan.train.streaming_split(2, equal=True)
    for epoch in range(1, args.epochs + 1):
        marks: dict[str, float] = {}
        start = time.perf_counter()
        threads = [threading.Thread(target=consume, args=(shards[r], r, marks, start))
                   for r in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        shown = ", ".join(f"{k} {v:.2f} s" for k, v in sorted(marks.items()))
        print(f"epoch {epoch}, {dataset.BATCHES_PER_BLOCK} batch(es) per block: {shown}",
              flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
