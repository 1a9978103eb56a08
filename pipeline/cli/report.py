"""``pipeline report RUN_DIR``: reprint a run's verdict and regenerate its plot and report.

Reads ``RUN_DIR/profile.json`` (see :mod:`pipeline.profile.schema`), re-runs the diagnosis with
the thresholds of ``RUN_DIR/config.yaml`` when it is there (defaults otherwise, so thresholds can
be tuned and the verdict re-read without re-running), prints it, and rewrites ``breakdown.png``
and ``report.md``, whose last section (where the job's wall time went) comes from
``summary.json``: a summary that cannot give it is said, not skipped. ``timeline.json`` is left
as the run wrote it. Needs no Ray and no GPU.
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipeline.profile import (
    PHASES,
    Diagnosis,
    ProfileConfig,
    diagnose,
    load_profile,
    write_artifacts,
)

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.yaml"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add the arguments of ``pipeline report``."""
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path,
                        help="run directory holding profile.json (and optionally config.yaml)")


def main(args: argparse.Namespace) -> int:
    """Print the verdict of ``args.run_dir`` and rewrite its plot and report; 0 on success."""
    console = Console()
    run_dir: Path = args.run_dir
    try:
        saved = load_profile(run_dir)
        config = _profile_config(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        console.print(f"[bold red]error:[/] {exc}")
        return 1
    diagnosis = diagnose(saved.merged, saved.data_ops, config, saved.context)
    written = write_artifacts(run_dir, saved, diagnosis, timeline=False)
    _add_wall_time(console, run_dir, written["report.md"])
    _print(console, diagnosis, saved.merged)
    for name, path in written.items():
        console.print(f"wrote {name}: {path}")
    return 0


def _add_wall_time(console: Console, run_dir: Path, report: Path) -> None:
    """``report.md``'s section on the job's wall time, from ``summary.json``, as the run wrote
    it; a warning that names the file and why when the summary cannot give it."""
    from pipeline.job.breakdown import append_to_report

    path = run_dir / "summary.json"
    try:
        rows = json.loads(path.read_text()).get("breakdown")
    except FileNotFoundError:
        why = "is missing"
    except (OSError, ValueError, AttributeError) as exc:
        why = f"unreadable ({type(exc).__name__}: {exc})"
    else:
        if isinstance(rows, list) and rows:
            append_to_report(report, rows)
            return
        why = "has no breakdown (the run did not finish)"
    console.print(f"[yellow]warning[/]: {path} {why}: report.md has no section on the job's "
                  f"wall time", highlight=False)


def _profile_config(run_dir: Path) -> ProfileConfig:
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        logger.info("%s not found; diagnosing with default thresholds", path)
        return ProfileConfig()
    from pipeline.config import load_config  # parses the whole job config, only when present

    return load_config(path).profile


def _print(console: Console, diagnosis: Diagnosis, merged: dict) -> None:
    colour = "green" if diagnosis.verdict == "compute_bound" else "yellow"
    console.print(f"[bold {colour}]{diagnosis.verdict}[/]")
    for line in diagnosis.advice:
        console.print(f"  • {line}")
    table = Table(title="mean step breakdown", show_edge=False)
    table.add_column("phase")
    table.add_column("ms/step", justify="right")
    table.add_column("share", justify="right")
    for phase in PHASES:
        p = merged["phases"][phase]
        table.add_row(phase, f"{p['per_step_s'] * 1e3:.2f}", f"{p['fraction']:.1%}")
    console.print(table)
