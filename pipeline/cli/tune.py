"""``pipeline tune CONFIG [--set KEY=VALUE ...] [--budget-s S] [--max-trials N] [--output DIR]``.

Short probe runs, diagnosed; the changes the diagnosis names are tried one trial at a time and
kept only when they help (:mod:`pipeline.tune`). Prints a table of the trials and writes
``tuned.yaml`` and ``tune.json``. Exits 0 when nothing helped too (and says so).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipeline.config import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field for every probe (and in "
                                                  "tuned.yaml)")
    parser.add_argument("--budget-s", type=float, default=900.0,
                        help="total time; no probe is started that would end past it "
                             "(default 900)")
    parser.add_argument("--max-trials", type=int, default=4,
                        help="changes tried at most, after the baseline probe (default 4)")
    parser.add_argument("--output", type=Path,
                        help="directory for the probes, tuned.yaml and tune.json "
                             "(default runs/tune-<timestamp>)")


def trials_table(outcome) -> Table:
    table = Table(title="pipeline tune")
    for column in ("trial", "change", "training samples/s before → after (judged)",
                   "job samples/s", "verdict before → after", "result"):
        table.add_column(column, overflow="fold")
    base = outcome.baseline
    table.add_row("0", "(baseline)", f"{base.judged:,.1f}", f"{base.samples_per_s:,.1f}",
                  base.verdict, "-")
    for t in outcome.trials:
        change = "\n".join(c.label() for c in t.changes)
        if t.after is None:
            rate, job = f"{t.before.judged:,.1f} → failed", "-"
            verdict = f"{t.before.verdict} → -"
        else:
            rate = f"{t.before.judged:,.1f} → {t.after.judged:,.1f} ({t.ratio:.2f}x)"
            job = f"{t.before.samples_per_s:,.1f} → {t.after.samples_per_s:,.1f}"
            verdict = f"{t.before.verdict} → {t.after.verdict}"
        table.add_row(str(t.number), change, rate, job, verdict,
                      "kept" if t.kept else "reverted")
    return table


def main(args: argparse.Namespace) -> int:
    from pipeline.errors import PlanError
    from pipeline.tune import Budget, Tuner

    console = Console(stderr=True, soft_wrap=True)
    output = args.output or Path("runs") / f"tune-{time.strftime('%Y%m%d-%H%M%S')}"
    try:
        tuner = Tuner(args.config, sets=args.overrides, output=output, console=console,
                      budget=Budget(max_trials=args.max_trials, budget_s=args.budget_s))
        outcome = tuner.run()
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]config error[/]: {line}")
        return 2
    except PlanError as exc:
        console.print(f"[red]plan refused[/]: {exc}")
        return 3
    out = Console(soft_wrap=True)
    out.print(trials_table(outcome))
    for t in outcome.trials:
        out.print(f"trial {t.number}: {', '.join(c.label() for c in t.changes)}: {t.reason}")
    out.print(f"stopped: {outcome.stopped}")
    if outcome.kept:
        out.print(f"tuned: {outcome.baseline.samples_per_s:,.1f} → "
                  f"{outcome.final.samples_per_s:,.1f} samples/s ({outcome.gain:.2f}x) with "
                  f"{', '.join(c.label() for c in outcome.kept)}")
    else:
        out.print("no change helped: tuned.yaml is the config as given")
    if outcome.baseline.changes_from == "fallback":
        out.print("note: the diagnosis named no machine-readable changes; tune used its own "
                  "fallback table (pipeline.tune.decide.fallback_changes)")
    console.print(f"wrote {output / 'tuned.yaml'} and {output / 'tune.json'}")
    return 0
