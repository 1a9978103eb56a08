"""``pipeline run CONFIG [--set KEY=VALUE ...] [--address ADDR] [--output DIR]``.

Ctrl-C or SIGTERM stops the run cleanly (:mod:`pipeline.cluster.stop`): exit 130 or 143 with the
command that resumes it; a second one stops at once.
"""

from __future__ import annotations

import argparse
import signal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.config import ConfigError


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file")
    parser.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="override a field, e.g. train.epochs=3")
    parser.add_argument("--address", help="Ray cluster to join (default: RAY_ADDRESS, else local)")
    parser.add_argument("--output", help="run directory (default runs/<name>-<timestamp>)")


def summary_table(summary: dict) -> Table:
    table = Table(title="Feedline run", show_header=False)
    keys = ("status", "epochs", "samples", "samples_per_second", "steady_samples_per_second",
            "wall_seconds", "num_workers",
            "val_accuracy", "train_loss", "bad_samples", "skipped_files", "backend", "ray_address",
            "checkpoint")
    for key in keys:
        value = summary.get(key)
        if value is None:
            continue
        table.add_row(key, f"{value:,.3f}" if isinstance(value, float) else str(value))
    return table


def breakdown_table(rows: list[dict]) -> Table:
    table = Table(title="Where the wall time went (process start to exit)")
    table.add_column("phase")
    table.add_column("seconds", justify="right")
    table.add_column("share", justify="right")
    for row in rows:
        table.add_row(row["phase"], f"{row['seconds']:.2f}", f"{row['share']:.1%}")
    return table


def stopped_lines(summary: dict, signum: int, output: str) -> list[str]:
    """What the console says about a run a signal stopped: where, and how to resume."""
    name = signal.Signals(signum).name
    if summary.get("status") != "stopped":  # it had finished; the stop came while Ray shut down
        return [f"stopped by {name} after the run finished; results in {output}"]
    at = summary.get("resumes_at")
    where = (f"last checkpoint {summary['checkpoint']} (resumes at epoch {at['epoch']}, after "
             f"step {at['after_step']})" if summary.get("checkpoint")
             else "no checkpoint yet: rerunning starts from the beginning")
    lines = [f"stopped by {name} after {summary['epochs_done']} of {summary['epochs']} epochs; "
             f"{where}"]
    if summary.get("resume"):
        lines.append(f"resume with: {summary['resume']}")
    return lines


def main(args: argparse.Namespace) -> int:
    from pipeline.cluster.session import exit_now
    from pipeline.cluster.stop import stop_on_signals

    with stop_on_signals():  # up to the last line printed: a second Ctrl-C is always at once
        code = _run(args)
    exit_now(code)  # a local Ray left to its watchdog: the prompt comes back now
    return code


def _run(args: argparse.Namespace) -> int:
    from pipeline.api import run
    from pipeline.cluster.stop import received
    from pipeline.errors import (
        BadSampleThresholdError,
        NonFiniteLossError,
        OutputWriteError,
        PlanError,
        RunStopped,
    )
    from pipeline.job.breakdown import JobClock
    from pipeline.procfs import process_start

    console = Console(stderr=True, soft_wrap=True)
    overrides = list(args.overrides)
    if args.address:
        overrides.append(f"run.address={args.address}")
    if args.output:
        overrides.append(f"run.output={args.output}")
    try:
        # timed from process start: imports and Ray's start are part of what the user waits for
        result = run(args.config, sets=overrides, console=console,
                     clock=JobClock(process_start()), ray_logs=getattr(args, "verbose", False),
                     hand_over=True)
    except RunStopped as exc:
        first, *rest = stopped_lines(exc.summary, exc.signum, str(exc.output))
        console.print(f"[yellow]{escape(first)}[/]", highlight=False)
        for line in rest:  # the resume command, plain to copy
            console.print(line, markup=False, highlight=False)
        return exc.exit_code
    except KeyboardInterrupt:  # before the run directory was made: nothing to resume
        signum = received() or signal.SIGINT
        console.print(f"[yellow]stopped by {signal.Signals(signum).name} before the run "
                      f"started[/]", highlight=False)
        return 128 + signum
    except ConfigError as exc:
        for line in exc.errors:
            console.print(f"[red]config error[/]: {escape(line)}", highlight=False)
        return 2
    except PlanError as exc:
        console.print(f"[red]plan refused[/]: {exc}")
        return 3
    except BadSampleThresholdError as exc:
        console.print(f"[red]run stopped[/]: {exc}")
        return 1
    except NonFiniteLossError as exc:
        console.print(f"[red]run diverged[/]: {escape(str(exc))}", highlight=False)
        return 5
    except OutputWriteError as exc:  # the run folder's disk is full (or read-only)
        console.print(f"[red]cannot write[/]: {escape(str(exc))}", highlight=False)
        return 6
    except ConnectionError as exc:  # the cluster at run.address never answered
        console.print(f"[red]cluster unreachable[/]: {escape(str(exc))}", highlight=False)
        return 4
    Console().print(summary_table(result.summary))
    Console().print(breakdown_table(result.summary.get("breakdown", [])))
    console.print(f"results in {result.output}")
    return 0
