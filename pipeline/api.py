"""``pipeline.run``: the Python entry point, the same job as ``pipeline run``.

Usable inside an existing Ray driver (after the caller's own ``ray.init``): the caller's Ray is
used and left running. A run stopped by Ctrl-C or SIGTERM (``KeyboardInterrupt``) writes
``summary.json`` with ``status: stopped``, its last checkpoint and the command that resumes it,
and raises :class:`~pipeline.cluster.stop.RunStopped`.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.markup import escape

from pipeline.cluster.stop import RunStopped, received
from pipeline.config import Config, ConfigError, load_config, to_dict
from pipeline.data import ReaderSpec, plan_source
from pipeline.data.sources import SourcePlan, skipped_warning
from pipeline.job.breakdown import JobClock, to_markdown


@dataclass(frozen=True)
class RunResult:
    """What a finished run produced: its directory and summary (also ``summary.json``)."""

    output: Path
    summary: dict[str, Any]
    config: Config


def output_dir(config: Config) -> Path:
    if config.run.output:
        return Path(config.run.output).expanduser()
    return Path("runs") / f"{config.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"


def previous_run(out: Path) -> str | None:
    """What a run directory holds, said before this run uses it: refused (``ConfigError``) when
    it holds a finished run or one still running; a line on what this run resumes when its run
    failed, was stopped or died without a word (SIGKILL: ``status`` still ``running``, its
    process gone). Ray Train finds the run's checkpoints there and resumes from the last one."""
    try:
        previous = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    status = previous.get("status")
    if status == "succeeded":
        raise ConfigError([f"run.output ({str(out)!r}) already holds a finished run; choose "
                           f"another run.output"])
    pid, host = previous.get("pid"), previous.get("host")
    if status == "running" and host == socket.gethostname() and _alive(pid, previous):
        raise ConfigError([f"run.output ({str(out)!r}) is in use by a run still going (process "
                           f"{pid}, started {previous.get('started')}); wait for it, stop it "
                           f"(kill -INT {pid}) or choose another run.output"])
    how = {"running": f"ended without a word (process {pid} on {host} is gone: killed?)",
           "stopped": f"was stopped by {previous.get('signal')}",
           "failed": f"failed ({previous.get('error')})"}.get(status, f"ended as {status!r}")
    from pipeline.job.runner import last_checkpoint

    checkpoint = last_checkpoint(out)
    where = (f"resuming from its last checkpoint (epoch {checkpoint['epoch']}, after step "
             f"{checkpoint['step']})" if checkpoint else "no checkpoint: starting again")
    return f"{out}: the run there {how}; {where}"


def _alive(pid: Any, summary: dict[str, Any]) -> bool:
    """The process a ``running`` summary names still runs (not another one under its pid)."""
    from pipeline.procfs import started

    return isinstance(pid, int) and started(pid) == summary.get("pid_start")


def check_source(config: Config, console: Console) -> tuple[SourcePlan, ReaderSpec] | None:
    """Plan the data source on the driver, warn about files it does not read, and return the
    plan for the run to use (None for a ``ray`` source: planned once Ray runs). Raises
    :class:`ConfigError` for data that cannot train."""
    planned = plan_source(config.data)
    if planned is None:
        return None
    plan, spec = planned
    warning = skipped_warning(plan)
    if warning:
        console.print(f"[yellow]warning[/]: {escape(warning)}", highlight=False)
    return plan, spec


def with_datasets(config: Config) -> Config:
    """``config`` whose source is the datasets given to ``pipeline.run`` (a ``ray`` source;
    its ``input`` kept)."""
    from dataclasses import replace

    from pipeline.data import RaySource

    source = config.data.source
    if not isinstance(source, RaySource):
        source = RaySource()
    return replace(config, data=replace(config.data, source=source))


def check_task(config: Config, task: Any = None) -> Any:
    """The run's task (``task``, else ``train.task``), imported and checked on the driver; a
    ``ConfigError`` naming ``train.task`` when it cannot be used."""
    from pipeline.train.task import resolve_task

    try:
        return resolve_task(task if task is not None else config.train.task)
    except (ValueError, TypeError, ImportError, AttributeError) as exc:
        raise ConfigError([str(exc)]) from exc


def run(config: str | Path | dict | Config, *, sets: list[str] | tuple[str, ...] = (),
        console: Console | None = None, show_progress: bool = True,
        clock: JobClock | None = None, task: Any = None, datasets: Any = None,
        ray_logs: bool = False, **overrides: Any) -> RunResult:
    """Run a job. ``sets`` are CLI-style ``KEY=VALUE`` strings (values parsed as YAML);
    ``overrides`` use dotted keys (``**{"train.epochs": 3}``) or ``train__epochs=3``.
    ``clock`` times the run from its start (the CLI's starts at process start); by default
    the run is timed from this call. ``task`` (a :class:`pipeline.Task`, pickled to every
    Train worker) replaces ``train.task``. ``datasets`` (a ``ray.data.Dataset``, split by
    ``data.val_fraction``, or ``{"train": ds, "val": ds}``, built after your ``ray.init``)
    replaces ``data.source``: the run's source becomes ``kind: ray``
    (:mod:`pipeline.data.sources.ray_dataset`). Ray's own log lines (its driver's, and its
    workers' output) go to the run directory unless ``ray_logs`` (the CLI's ``-v``) brings
    them to the console.

    Raises :class:`~pipeline.config.ConfigError` for a bad config or data that cannot train
    (checked before Ray starts),
    :class:`~pipeline.errors.PlanError` for a plan that would starve preprocessing,
    ``BadSampleThresholdError`` when the data is broken,
    :class:`~pipeline.cluster.stop.RunStopped` when stopped (Ctrl-C, SIGTERM), and Ray Train's
    errors otherwise.
    """
    from pipeline.cluster.session import ray_driver_log, ray_session
    from pipeline.job.runner import run_job

    clock = clock or JobClock(time.time())
    sets = [*sets, *(f"{k.replace('__', '.')}={json.dumps(v)}" for k, v in overrides.items())]
    cfg = load_config(config, sets)
    if datasets is not None:
        cfg = with_datasets(cfg)
    console = console or Console(stderr=True, soft_wrap=True)
    out = output_dir(cfg)
    found = previous_run(out)
    source = check_source(cfg, console)  # before Ray: a bad data path fails in seconds
    task = check_task(cfg, task)  # and a task that cannot be imported
    if found:
        console.print(f"[yellow]resume[/]: {escape(found)}", highlight=False)
    out.mkdir(parents=True, exist_ok=True)
    (out / "config.yaml").write_text(yaml.safe_dump(to_dict(cfg), sort_keys=False))
    resume = resume_command(config, sets, out) if datasets is None else None
    _write_running(out, cfg, resume)
    clock.mark("entered")
    address, summary = None, None
    try:
        with (nullcontext() if ray_logs else ray_driver_log(out / "ray-driver.log")), \
                ray_session(cfg.run.address, cfg.run.num_cpus, dashboard=cfg.run.dashboard,
                            connect_timeout_s=cfg.run.connect_timeout_s,
                            allocator=cfg.run.allocator, log_to_driver=ray_logs) as session:
            clock.mark("ray_started")
            address = session.address
            console.print(f"[bold]ray[/]: {session.mode} cluster at {session.address}; "
                          f"writing {out.resolve()}")
            _link_ray_logs(session, out)
            try:
                summary = run_job(cfg, out, ray_address=session.address, console=console,
                                  clock=clock, show_progress=show_progress, source=source,
                                  task=task, datasets=datasets)
                clock.mark("outputs_done")
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                running = json.loads((out / "summary.json").read_text())
                if running.get("status") == "running":  # the job did not say why itself
                    (out / "summary.json").write_text(json.dumps(running | {
                        "status": "failed", "error": f"{type(exc).__name__}: {exc}",
                        "ray_address": session.address}, indent=2))
                raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM; what the run started has stopped by now
        raise _stopped(config if datasets is None else cfg, sets, cfg, out, address,
                       summary) from None
    clock.mark("ray_stopped")
    summary = _with_breakdown(summary, clock, out)
    return RunResult(output=out, summary=summary, config=cfg)


def resume_command(config: str | Path | dict | Config, sets: list[str] | tuple[str, ...],
                   out: Path) -> str | None:
    """The ``pipeline run`` command that resumes a run: the same config and overrides, into the
    same run directory. None for a config given as a dict or ``Config`` (no file to name)."""
    if not isinstance(config, (str, Path)):
        return None
    args = ["pipeline", "run", str(config)]
    for item in sets:
        key, _, value = item.partition("=")
        if key.strip() == "run.address":
            args += ["--address", value]
        elif key.strip() != "run.output":
            args += ["--set", item]
    return shlex.join([*args, "--output", str(out)])


def _stopped(config: str | Path | dict | Config, sets: list[str], cfg: Config, out: Path,
             address: str | None, summary: dict[str, Any] | None) -> RunStopped:
    """Write ``summary.json`` for a run stopped by a signal (unless it had finished and the stop
    came while Ray shut down) and return the :class:`RunStopped` to raise."""
    from pipeline.job.runner import last_checkpoint

    signum = received() or signal.SIGINT  # a plain KeyboardInterrupt: Ctrl-C
    if summary is None:
        checkpoint = last_checkpoint(out)
        summary = {
            "status": "stopped",
            "signal": signal.Signals(signum).name,
            "name": cfg.run.name,
            "epochs": cfg.train.epochs,
            "epochs_done": checkpoint["epoch"] if checkpoint else 0,
            # the latest checkpoint Ray Train registered: the rerun resumes from it
            "checkpoint": checkpoint["path"] if checkpoint else None,
            "resumes_at": ({"epoch": checkpoint["epoch"] + 1, "after_step": checkpoint["step"]}
                           if checkpoint else None),
            "resume": resume_command(config, sets, out),
            "ray_address": address,
        }
        (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return RunStopped(signum, out, summary)


def _write_running(out: Path, cfg: Config, resume: str | None) -> None:
    """``summary.json`` while the run goes: which process holds the directory, so that a rerun
    refuses a live one and knows a killed one (the status stays ``running``) for what it is."""
    from pipeline.procfs import started

    (out / "summary.json").write_text(json.dumps({
        "status": "running", "name": cfg.run.name, "epochs": cfg.train.epochs,
        "pid": os.getpid(), "pid_start": started(os.getpid()),
        "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "resume": resume}, indent=2))


def _link_ray_logs(session: Any, out: Path) -> None:
    """``RUN_DIR/ray-logs`` → this node's Ray worker logs (they stay off the console)."""
    logs, link = session.logs, out / "ray-logs"
    if link.is_symlink():  # a rerun into the same folder (resume): point at this session
        link.unlink()
    if logs and not link.exists():
        link.symlink_to(logs, target_is_directory=True)


def _with_breakdown(summary: dict[str, Any], clock: JobClock, out: Path) -> dict[str, Any]:
    """The run's wall time and throughput from its start to Ray's shutdown, and where the time
    went: into summary.json and report.md."""
    rows = clock.breakdown()
    wall = sum(r["seconds"] for r in rows)
    summary = summary | {"wall_seconds": wall, "breakdown": rows,
                         "samples_per_second": summary["samples"] / wall if wall else 0.0}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    with open(out / "report.md", "a") as fh:
        fh.write("\n" + to_markdown(rows))
    return summary
