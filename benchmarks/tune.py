"""Does ``pipeline tune`` recover what a slow transform costs? Clean vs injected vs tuned.

    python benchmarks/tune.py [--config CFG] [--epochs 6] [--reps 3] [--max-trials 4]
                              [--injection sleep|waiting|computing] [--num-cpus 8]
                              [--budget-s 900] [--save NAME]   # → benchmarks/results/NAME-<date>.md

The injection is a slow transform (``tests.integration.tune_transforms``): ``sleep`` (10 ms a
sample), ``waiting`` (6 ms a sample asleep, as a read from object storage waits) or
``computing`` (6 ms a sample of CPU), with one decode actor (``data.concurrency: [1, 1]``) and
no replay of decoded samples (``data.cache: off``, so every epoch decodes and pays the
injection). ``--num-cpus 2`` gives Ray this machine's own cores: the plan then holds one CPU for
preprocessing, and the advice must fit it. The benchmark runs
``pipeline tune`` on the injected job once, then, in one Ray session on one machine, repeats
four arms with the order rotated each repetition:

- **clean**: the same job without the transform (still one decode actor);
- **injected**: the job with the transform;
- **tuned**: ``tuned.yaml`` from the tune session (the injected job plus the changes it kept);
- **clean+kept**: ``tuned.yaml`` without the transform. A kept change that speeds up any job
  (not only the injected one) lifts "tuned" above "clean"; tuned ÷ clean+kept shows what is left
  of the injection's cost once both have the change.

Every arm trains the same epochs with the end-of-run link probe off. The headline is samples ÷
job wall time (what the user waits for); the median of per-epoch samples/s after the first epoch
(steady state) is shown beside it. Recovered = (tuned − injected) / (clean − injected), from the
medians. Ray starts with ``--num-cpus`` logical CPUs (default 8, as the integration tests): the
injection sleeps, so more decode actors than cores still help.
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
sys.path.insert(0, str(ROOT))  # Ray workers inherit the driver's path: the transform imports

INJECTIONS = {"sleep": "slow_decode", "waiting": "waiting_decode",
              "computing": "computing_decode"}
ARMS = ("clean", "injected", "tuned", "clean+kept")
#: Every arm (and the tune session): one decode actor, every epoch decodes.
CASE = ("data.concurrency=[1, 1]", 'data.cache="off"')  # quoted: YAML reads off as false


def measure(config: str | Path, sets: list[str], out: Path) -> dict:
    """Run one arm into ``out``: the user's-wait rate and the steady per-epoch rate."""
    import pipeline
    from pipeline.tune.decide import user_wait_rate

    result = pipeline.run(config, show_progress=False,
                          sets=[*sets, f"run.output={out}", "collective.probe=false"])
    rates = [r["samples_per_second"] for r in map(json.loads, (out / "metrics.jsonl")
                                                  .read_text().splitlines())
             if r.get("type") != "pool"]  # epochs, not the pool controller's decisions
    return {"samples_per_s": user_wait_rate(result.summary),
            "steady_samples_per_s": statistics.median(rates[1:] or rates),
            "wall_s": result.summary["wall_seconds"],
            "verdict": (result.summary.get("diagnosis") or {}).get("verdict")}


def recovered(clean: float, injected: float, tuned: float) -> float | None:
    lost = clean - injected
    return (tuned - injected) / lost if lost > 0 else None


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):,.1f} ({min(values):,.1f}–{max(values):,.1f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "examples/quickstart.yaml"))
    parser.add_argument("--set", dest="sets", action="append", default=[],
                        metavar="KEY=VALUE", help="for every arm and the tune session")
    parser.add_argument("--epochs", type=int, default=6, help="epochs of each measured run")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--max-trials", type=int, default=4)
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--num-cpus", type=int, default=8)
    parser.add_argument("--injection", choices=sorted(INJECTIONS), default="sleep")
    parser.add_argument("--tuned", type=Path, help="measure this tuned.yaml (from an earlier "
                        "`pipeline tune` of the same injected case) instead of tuning here")
    parser.add_argument("--save", metavar="NAME", help="also write results/NAME-<date>.md/.json")
    args = parser.parse_args(argv)
    injection = f"data.transform=tests.integration.tune_transforms:{INJECTIONS[args.injection]}"
    import ray

    from pipeline.tune import Budget, Tuner

    base = [*CASE, *args.sets]
    ray.init(address="local", num_cpus=args.num_cpus, include_dashboard=False,
             log_to_driver=False)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="feedline-tune-bench-") as tmp:
        started = time.perf_counter()
        if args.tuned:
            tuned_yaml, kept, stopped, trials = args.tuned, ["(from --tuned)"], "not tuned here", 0
        else:
            outcome = Tuner(args.config, sets=[*base, injection], output=Path(tmp) / "tune",
                            budget=Budget(max_trials=args.max_trials, budget_s=args.budget_s),
                            show_progress=False).run()
            tuned_yaml = Path(tmp) / "tune" / "tuned.yaml"
            kept = [c.label() for c in outcome.kept]
            stopped, trials = outcome.stopped, len(outcome.trials)
        tune_s = time.perf_counter() - started
        print(json.dumps({"tune": {"seconds": tune_s, "kept": kept, "stopped": stopped,
                                   "trials": trials, "tuned_yaml": str(tuned_yaml)}}),
              flush=True)
        tuned_text = tuned_yaml.read_text()
        arms = {"clean": (args.config, base), "injected": (args.config, [*base, injection]),
                "tuned": (tuned_yaml, []), "clean+kept": (tuned_yaml, ["data.transform="])}
        for rep in range(args.reps):
            for arm in ARMS[rep % len(ARMS):] + ARMS[:rep % len(ARMS)]:
                config, sets = arms[arm]
                row = {"rep": rep, "arm": arm,
                       **measure(config, [*sets, f"train.epochs={args.epochs}"],
                                 Path(tmp) / f"{rep}-{arm}")}
                rows.append(row)
                print(json.dumps(row), flush=True)
    ray.shutdown()
    user = {a: [r["samples_per_s"] for r in rows if r["arm"] == a] for a in ARMS}
    steady = {a: [r["steady_samples_per_s"] for r in rows if r["arm"] == a] for a in ARMS}
    med = {a: statistics.median(user[a]) for a in ARMS}
    med_steady = {a: statistics.median(steady[a]) for a in ARMS}
    headline = recovered(med["clean"], med["injected"], med["tuned"])
    beside = recovered(med_steady["clean"], med_steady["injected"], med_steady["tuned"])

    def fraction(value: float | None) -> str:
        return f"{value:.0%}" if value is not None else "n/a (the injection cost nothing)"

    table = "\n".join([
        "| arm | samples/s, job wall (median, min–max) | steady samples/s (median, min–max) |",
        "|---|---:|---:|",
        *(f"| {a} | {spread(user[a])} | {spread(steady[a])} |" for a in ARMS),
        "",
        f"recovered (job wall): **{fraction(headline)}**; steady state: {fraction(beside)}",
        f"tuned ÷ injected: **{med['tuned'] / med['injected']:.2f}x** (job wall)",
        f"tuned ÷ clean+kept: {med['tuned'] / med['clean+kept']:.2f} (job wall), "
        f"{med_steady['tuned'] / med_steady['clean+kept']:.2f} (steady)",
        f"tune kept: {', '.join(kept) or 'nothing'} ({trials} trial(s), {tune_s:.0f}s; "
        f"stopped: {stopped})",
        f"{args.reps} rotated reps, {args.epochs} epochs each, Ray num_cpus={args.num_cpus}, "
        f"config {os.path.relpath(args.config, ROOT)}, "
        f"injection {injection.split('=', 1)[1]}",
    ])
    print(table)
    if args.save:
        stem = ROOT / "benchmarks/results" / f"{args.save}-{time.strftime('%Y-%m-%d')}"
        command = " ".join(["python benchmarks/tune.py", *(argv or sys.argv[1:])])
        every = "\n".join(json.dumps(r) for r in rows)
        stem.with_suffix(".md").write_text(
            f"# pipeline tune: slow-transform recovery ({args.injection})\n\n`{command}`\n\n"
            f"{table}\n\n"
            f"tuned.yaml:\n\n```yaml\n{tuned_text}```\n\nEvery run:\n\n```\n{every}\n```\n")
        stem.with_suffix(".json").write_text(json.dumps(
            {"command": command, "injection": args.injection, "rows": rows,
             "recovered": headline, "tuned_over_injected": med["tuned"] / med["injected"],
             "recovered_steady": beside, "kept": kept, "stopped": stopped,
             "tuned_yaml": tuned_text}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
