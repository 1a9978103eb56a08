"""A/B: what a setting costs. The same config with and without some ``--set``s, interleaved.

    python benchmarks/ab.py --b train.deterministic=true [--a ...] [--config CFG] [--reps 3]
                            [--save NAME]   # → benchmarks/results/NAME-<date>.md

Each repetition runs A and B (alternating which goes first, so drift of a shared machine
cancels) and takes the median of the per-epoch samples/s after the first epoch (the first
includes actor start-up). Prints every run as JSON and a Markdown table of medians and B/A.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def steady_rate(config: str | Path, sets: list[str], out: Path) -> dict:
    """Run ``config`` with ``sets`` into ``out``; samples/s of the epochs after the first."""
    import pipeline

    result = pipeline.run(config, show_progress=False,
                          sets=[*sets, f"run.output={out}", "collective.probe=false"])
    rates = [r["samples_per_second"] for r in map(json.loads, (out / "metrics.jsonl")
                                                  .read_text().splitlines())
             if r.get("type") != "pool"]  # epochs, not the pool controller's decisions
    return {"samples_per_s": statistics.median(rates[1:] or rates), "epochs": rates,
            "bad_samples": result.summary["bad_samples"],
            "exactly_once": result.summary["exactly_once"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "examples/quickstart.yaml"))
    parser.add_argument("--a", nargs="*", default=[], help="KEY=VALUE sets of A (the baseline)")
    parser.add_argument("--b", nargs="+", required=True, help="KEY=VALUE sets of B")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save", metavar="NAME", help="also write results/NAME-<date>.md")
    args = parser.parse_args(argv)
    import ray

    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    rates: dict[str, list[float]] = {"A": [], "B": []}
    rows = []
    with tempfile.TemporaryDirectory(prefix="feedline-ab-") as tmp:
        for rep in range(args.reps):
            for arm in ("A", "B") if rep % 2 == 0 else ("B", "A"):
                sets = [*(args.a if arm == "A" else args.b), f"train.epochs={args.epochs}"]
                row = steady_rate(args.config, sets, Path(tmp) / f"{rep}-{arm}")
                rows.append(json.dumps({"rep": rep, "arm": arm, "sets": sets, **row}))
                print(rows[-1], flush=True)
                rates[arm].append(row["samples_per_s"])
    ray.shutdown()
    a, b = statistics.median(rates["A"]), statistics.median(rates["B"])
    table = (f"| arm | sets | median samples/s |\n|---|---|---:|\n"
             f"| A | {' '.join(args.a) or '(config)'} | {a:,.0f} |\n"
             f"| B | {' '.join(args.b)} | {b:,.0f} |\n\nB / A = {b / a:.2f} "
             f"({args.reps} interleaved reps, {args.epochs} epochs each, config "
             f"{os.path.relpath(args.config, ROOT)})")
    print(table)
    if args.save:
        command = " ".join(["python benchmarks/ab.py", *sys.argv[1:]])
        runs = "\n".join(rows)
        (ROOT / "benchmarks/results" / f"{args.save}-{time.strftime('%Y-%m-%d')}.md").write_text(
            f"# A/B: {' '.join(args.b)}\n\n`{command}`\n\n{table}\n\nEvery run:\n\n"
            f"```\n{runs}\n```\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
