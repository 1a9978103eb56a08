"""``pipeline bench scaling --workers 1,2,4 CONFIG``: the same job at several worker counts.

Reports per-worker throughput and scaling efficiency against the smallest count, and attributes
the loss to the phases whose time per sample grew (``pipeline.profile.scaling_report``). All runs
share one Ray session; a count the planner refuses is listed with the planner's reason.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipeline.config import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--workers", default="1,2", help="comma-separated worker counts")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field for every run")
    parser.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else local)")
    parser.add_argument("--output", type=Path, default=Path("runs/scaling"),
                        help="directory for one run directory per worker count")
    parser.add_argument("--json", type=Path, help="also write the report as JSON")


def _counts(text: str) -> list[int]:
    try:
        counts = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        counts = []
    if not counts or counts[0] < 1:
        raise ConfigError([f"--workers ({text!r}) must list worker counts >= 1, e.g. 1,2,4"])
    return counts


def main(args: argparse.Namespace) -> int:
    from pipeline.api import run
    from pipeline.cluster.session import ray_session
    from pipeline.config import load_config
    from pipeline.errors import PlanError
    from pipeline.profile import load_profile, scaling_report

    console = Console(stderr=True, soft_wrap=True)
    try:
        counts = _counts(args.workers)
        config = load_config(args.config, args.overrides)
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]config error[/]: {line}")
        return 2
    runs, refused = [], {}
    with ray_session(args.address or config.run.address, config.run.num_cpus):
        for n in counts:
            out = args.output / f"workers-{n}"
            console.print(f"[bold]scaling[/]: {n} worker(s) → {out}")
            try:
                result = run(config, sets=[f"train.num_workers={n}", f"run.output={out}"],
                             console=console, show_progress=False)
            except PlanError as exc:
                refused[n] = str(exc)
                console.print(f"[yellow]{n} worker(s) refused by the planner[/]: {exc}")
                continue
            runs.append({"workers": n, "merged": load_profile(out).merged,
                         "samples_per_s": result.summary["samples_per_second"]})
    if not runs:
        console.print("[red]no worker count could run[/]")
        return 3
    report = scaling_report(runs) | {"refused": refused}
    table = Table(title="scaling")
    for column in ("workers", "samples/s", "per worker", "efficiency", "step ms", "main cause"):
        table.add_column(column)
    for row in report["runs"]:
        table.add_row(str(row["workers"]), f"{row['samples_per_s']:,.0f}",
                      f"{row['per_worker_samples_per_s']:,.0f}", f"{row['efficiency']:.0%}",
                      f"{row['step_s'] * 1000:.1f}", row["main_cause"] or "-")
    for n in refused:
        table.add_row(str(n), "-", "-", "-", "-", "refused by the planner")
    out = Console(soft_wrap=True)
    out.print(table)
    for row in report["runs"]:
        out.print(f"{row['workers']} worker(s): {row['explanation']}")
    for n, reason in refused.items():
        out.print(f"{n} worker(s): refused: {reason}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0
