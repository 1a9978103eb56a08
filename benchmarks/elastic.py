"""The decode pool controller (``data.autoscale``) vs Ray Data's own pool autoscaling vs fixed
pools, on one injected workload.

    python benchmarks/elastic.py [--reps 2] [--epochs 3] [--fixed 2 4 6 8] [--cache memory]
                                 [--save NAME]   # → benchmarks/results/NAME-<date>.md/.json

The workload is examples/quickstart.yaml (1,797 real digits, two Train workers) with a sleep
per decoded sample (25 ms: one actor decodes 40 samples/s) and one per training step (150 ms
per 16 samples per rank: the trainers eat about 150 samples/s), no replay of decoded samples
(``data.cache: off``: every epoch decodes; ``--cache memory``: only the first does, a short
job's case), half a CPU per decode actor. Sleeps, so more actors
than cores still help and the trainers' pace does not depend on the decode actors' CPU.
Arms, in one Ray session (``--num-cpus`` logical CPUs, 8 as the integration tests), the order
rotated each repetition:

- **fixed N**: ``data.concurrency: [N, N]`` for each N of ``--fixed`` (the sweep an expert
  would run to size the pool by hand);
- **ray**: ``[1, 8]`` with ``data.autoscale: false``: Ray Data's own actor autoscaler;
- **controller**: ``[1, 8]`` with ``data.autoscale: true``.

Per arm (medians over repetitions): samples ÷ job wall time (what the user waits for, start-up
included), the median per-epoch samples/s after the first epoch (steady), the slowest rank's
data-wait share of its steps over the run (the profile's), the time from the first training
step until the slowest rank first waited less than 5% over a 4 s window ("fed after"), the most
decode actors seen decoding in a window, and the decode actor-seconds held (actors decoding ×
time, summed over the controller's 2 s samples: what the pool cost in CPUs). Every arm reports
those samples: the controller samples the pool in every run and acts only when asked to.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # Ray workers inherit the driver's path: the injection imports

from tests.integration.elastic_transforms import CONTROL, set_costs  # noqa: E402

DECODE_S, STEP_S = 0.025, 0.15
CASE = ["train.batch_size=16", "train.cpus_per_worker=1", "data.val_fraction=0.05",
        "data.decode_batch_size=16", "data.cpus_per_actor=0.5",
        "data.transform=tests.integration.elastic_transforms:injected",
        "train.model=tests.integration.elastic_transforms:paced_cnn", "collective.probe=false"]


def arms(fixed: list[int]) -> dict[str, list[str]]:
    out = {f"fixed {n}": [f"data.concurrency=[{n}, {n}]"] for n in fixed}
    out["ray"] = ["data.concurrency=[1, 8]", "data.autoscale=false"]
    out["controller"] = ["data.concurrency=[1, 8]", "data.autoscale=true"]
    return out


def fed_after(samples: list[dict]) -> float | None:
    """Seconds from the first window with training steps until the first whose slowest rank
    waited less than 5% while actors decoded (None: never)."""
    training = [s for s in samples if s["steps"]]
    fed = next((s for s in training if s["actors"] and s["wait"] < 0.05), None)
    return None if fed is None else fed["t"] - training[0]["t"]


def measure(sets: list[str], epochs: int, cache: str, out: Path) -> dict:
    import pipeline

    result = pipeline.run(ROOT / "examples" / "quickstart.yaml", show_progress=False,
                          sets=[*CASE, *sets, f'data.cache="{cache}"', f"train.epochs={epochs}",
                          f"run.output={out}"])
    s = result.summary
    rates = [r["samples_per_second"] for r in map(json.loads, (out / "metrics.jsonl")
                                                  .read_text().splitlines())
             if r.get("type") != "pool"]
    samples = s["autoscale"]["samples"]
    return {"samples_per_s": s["samples"] / s["wall_seconds"],
            "steady_samples_per_s": statistics.median(rates[1:] or rates),
            "wall_s": s["wall_seconds"], "data_wait": s.get("data_wait_fraction"),
            "fed_after_s": fed_after(samples),
            "max_actors": max((x["actors"] for x in samples), default=0),
            "actor_s": sum(x["actors"] for x in samples) * 2.0,
            "decisions": [f"{d['action']} {d['size_before']}→{d['size_after']}"
                          for d in s["autoscale"].get("decisions", [])],
            "exactly_once": s["exactly_once"], "samples": samples}


def median(values: list) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def render(rows: dict[str, list[dict]], args: argparse.Namespace) -> str:
    med = {arm: {k: median([r[k] for r in runs]) for k in
                 ("samples_per_s", "steady_samples_per_s", "wall_s", "data_wait",
                  "fed_after_s", "max_actors", "actor_s")}
           for arm, runs in rows.items()}
    fixed = {a: m for a, m in med.items() if a.startswith("fixed")}
    best = max(fixed, key=lambda a: fixed[a]["samples_per_s"])
    lines = [f"# Decode pool sizing: controller vs Ray Data's autoscaling vs fixed pools "
             f"({date.today()})", "",
             f"`python benchmarks/elastic.py --reps {args.reps} --epochs {args.epochs} "
             f"--fixed {' '.join(map(str, args.fixed))} --cache {args.cache}`; "
             f"{DECODE_S * 1e3:.0f} ms injected per decoded sample, {STEP_S * 1e3:.0f} ms per "
             f"training step, data.cache {args.cache}, "
             f"{args.num_cpus} logical CPUs on this machine; medians of {args.reps} "
             f"repetition(s). Best fixed pool: **{best}**.", "",
             "| arm | samples/s (wall) | vs best fixed | steady samples/s | data wait | "
             "fed after s | max actors | actor-s | decisions (first run) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    top = med[best]["samples_per_s"]
    for arm, m in med.items():
        fed = "never" if m["fed_after_s"] is None else f"{m['fed_after_s']:.0f}"
        wait = "" if m["data_wait"] is None else f"{m['data_wait']:.1%}"
        lines.append(f"| {arm} | {m['samples_per_s']:.1f} | {m['samples_per_s'] / top:.2f} | "
                     f"{m['steady_samples_per_s']:.1f} | {wait} | {fed} | "
                     f"{m['max_actors']:.0f} | {m['actor_s']:.0f} | "
                     f"{', '.join(rows[arm][0]['decisions']) or '-'} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--fixed", type=int, nargs="+", default=[2, 4, 6, 8])
    parser.add_argument("--num-cpus", type=int, default=8)
    parser.add_argument("--cache", default="off", choices=["off", "memory"],
                        help="off: every epoch decodes; memory: only the first (a short job)")
    parser.add_argument("--save", default="")
    args = parser.parse_args()
    import ray

    set_costs(decode_s=DECODE_S, step_s=STEP_S)
    ray.init(num_cpus=args.num_cpus, include_dashboard=False, log_to_driver=False)
    table = arms(args.fixed)
    rows: dict[str, list[dict]] = {arm: [] for arm in table}
    names = list(table)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(args.reps):
                order = names[rep % len(names):] + names[:rep % len(names)]
                for arm in order:
                    start = time.time()
                    row = measure(table[arm], args.epochs, args.cache,
                                  Path(tmp) / f"{rep}-{arm}")
                    rows[arm].append(row)
                    print(f"rep {rep + 1}/{args.reps} {arm}: {row['samples_per_s']:.1f} "
                          f"samples/s, wait {row['data_wait'] or 0:.1%}, fed after "
                          f"{row['fed_after_s']}, max actors {row['max_actors']} "
                          f"({time.time() - start:.0f} s)", flush=True)
    finally:
        CONTROL.unlink(missing_ok=True)
        ray.shutdown()
    text = render(rows, args)
    print(text)
    if args.save:
        results = ROOT / "benchmarks" / "results"
        stem = f"{args.save}-{date.today()}"
        (results / f"{stem}.json").write_text(json.dumps(rows, indent=1))
        (results / f"{stem}.md").write_text(text)


if __name__ == "__main__":
    main()
