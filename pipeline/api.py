"""``pipeline.run``: the Python entry point, the same job as ``pipeline run``.

Usable inside an existing Ray driver (after the caller's own ``ray.init``): the caller's Ray is
used and left running. A run stopped by Ctrl-C or SIGTERM (``KeyboardInterrupt``) writes
``summary.json`` with ``status: stopped``, its last checkpoint and the command that resumes it,
and raises :class:`~pipeline.cluster.stop.RunStopped`.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from pipeline.cluster.stop import at_once, received
from pipeline.config import Config, ConfigError, load_config, to_dict
from pipeline.data import ReaderSpec, plan_source
from pipeline.data.sources import SourcePlan, skipped_warning
from pipeline.errors import NonFiniteLossError, OutputWriteError, RunStopped
from pipeline.job.breakdown import JobClock, append_to_report
from pipeline.job.rundir import RunDir
from pipeline.job.summary import RunSummary


@dataclass(frozen=True)
class RunResult:
    """What a finished run produced: its directory and summary (also ``summary.json``)."""

    output: Path
    summary: RunSummary
    config: Config


def output_dir(config: Config) -> Path:
    if config.run.output:
        return Path(config.run.output).expanduser()
    return Path("runs") / f"{config.run.name}-{time.strftime('%Y%m%d-%H%M%S')}"


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
        ray_logs: bool = False, hand_over: bool = False, **overrides: Any) -> RunResult:
    """Run a job. ``sets`` are CLI-style ``KEY=VALUE`` strings (values parsed as YAML);
    ``overrides`` use dotted keys (``**{"train.epochs": 3}``) or ``train__epochs=3``.
    ``clock`` times the run from its start (the CLI's starts at process start); by default
    the run is timed from this call. ``task`` (a :class:`pipeline.Task`, pickled to every
    Train worker) replaces ``train.task``. ``datasets`` (a ``ray.data.Dataset``, split by
    ``data.val_fraction``, or ``{"train": ds, "val": ds}``, built after your ``ray.init``)
    replaces ``data.source``: the run's source becomes ``kind: ray``
    (:mod:`pipeline.data.sources.ray_dataset`). Ray's own log lines (its driver's, and its
    workers' output) go to the run directory unless ``ray_logs`` (the CLI's ``-v``) brings
    them to the console. ``hand_over`` (the CLI, which exits right after): a local Ray is left
    to its watchdog to stop (:func:`pipeline.cluster.session.exit_now`).

    Raises :class:`~pipeline.config.ConfigError` for a bad config or data that cannot train
    (checked before Ray starts),
    :class:`~pipeline.errors.PlanError` for a plan that would starve preprocessing,
    ``BadSampleThresholdError`` when the data is broken,
    :class:`~pipeline.cluster.stop.RunStopped` when stopped (Ctrl-C, SIGTERM),
    :class:`~pipeline.errors.OutputWriteError` when the run folder's disk takes no more, and
    Ray Train's errors otherwise.
    """
    clock = clock or JobClock(time.time())
    console = console or Console(stderr=True, soft_wrap=True)
    sets = [*sets, *(f"{k.replace('__', '.')}={json.dumps(v)}" for k, v in overrides.items())]
    request = _checked(config, sets, task, datasets, console)  # before Ray: fails in seconds
    rundir = RunDir(output_dir(request.cfg))
    # the folder is held until the run ends (no second run in it); a full disk is said as such
    with rundir.claim() as found, OutputWriteError.converted(rundir.path):
        _begin(request, rundir, found, console)  # the earlier run, config.yaml, "running"
        clock.mark("entered")
        summary = _launch(request, rundir, clock, console, show_progress, ray_logs, hand_over)
        clock.mark("ray_stopped")
        summary = _with_breakdown(summary, clock, rundir)
    return RunResult(output=rundir.path, summary=summary, config=request.cfg)


@dataclass(frozen=True)
class _Request:
    """A run as asked for and checked on the driver, before Ray starts."""

    config: str | Path | dict | Config  # as given (the resume command names a file)
    sets: list[str]
    cfg: Config
    source: tuple[SourcePlan, ReaderSpec] | None
    task: Any  # resolved
    given_task: Any  # pipeline.run(task=...), or None
    datasets: Any


def _checked(config: str | Path | dict | Config, sets: list[str], task: Any, datasets: Any,
             console: Console) -> _Request:
    """The config, its data source and its task, each checked before Ray starts."""
    from pipeline.train.context import legacy_methods
    from pipeline.train.task import task_name

    cfg = load_config(config, sets)
    if datasets is not None:
        cfg = with_datasets(cfg)
    source = check_source(cfg, console)
    resolved = check_task(cfg, task)
    for line in legacy_methods(resolved, task_name(resolved)):
        console.print(f"[yellow]warning[/]: {escape(line)}", highlight=False)
    return _Request(config=config, sets=sets, cfg=cfg, source=source, task=resolved,
                    given_task=task, datasets=datasets)


def _begin(request: _Request, rundir: RunDir, found: str | None, console: Console) -> None:
    """Say what the folder held (a resumed run must train the same task), keep the run's
    config (and the earlier segment's, when settings changed), and mark the run ``running``
    with the command that resumes it."""
    cfg, out = request.cfg, rundir.path
    if found:
        _check_resumed_task(out, request.task)
        console.print(f"[yellow]resume[/]: {escape(found)}", highlight=False)
    changed = rundir.write_config(to_dict(cfg))
    if changed:
        console.print(f"[yellow]warning[/]: this run resumes with settings that differ from "
                      f"the ones its checkpoints were made with (the earlier ones are kept "
                      f"in config-*.yaml): {escape('; '.join(changed))}", highlight=False)
    task_sets = _task_set(cfg, request.task, request.given_task)
    resume = (resume_command(request.config, [*request.sets, *task_sets], out)
              if request.datasets is None and task_sets is not None else None)
    rundir.write_running(cfg.run.name, cfg.train.epochs, resume)


def _launch(request: _Request, rundir: RunDir, clock: JobClock, console: Console,
            show_progress: bool, ray_logs: bool, hand_over: bool) -> RunSummary:
    """Ray for the run's length (a local one it starts, or the cluster it joins) and the job
    on it; a failure leaves a summary that says why, a stop one that says how to resume."""
    from pipeline.cluster.session import ray_driver_log, ray_session
    from pipeline.job.runner import run_job

    cfg, out = request.cfg, rundir.path
    address, summary = None, None
    try:
        with at_once(rundir.write_stopped_at_once), \
                (nullcontext() if ray_logs else ray_driver_log(out / "ray-driver.log")), \
                ray_session(cfg.run.address, cfg.run.num_cpus, dashboard=cfg.run.dashboard,
                            connect_timeout_s=cfg.run.connect_timeout_s,
                            allocator=cfg.run.allocator, log_to_driver=ray_logs,
                            hand_over=hand_over) as session:
            clock.mark("ray_started")
            address = session.address
            console.print(f"[bold]ray[/]: {session.mode} cluster at {session.address}; "
                          f"writing {out.resolve()}")
            _link_ray_logs(session, out)
            try:
                summary = run_job(cfg, out, ray_address=session.address, console=console,
                                  clock=clock, show_progress=show_progress,
                                  source=request.source, task=request.task,
                                  datasets=request.datasets)
                clock.mark("outputs_done")
            except KeyboardInterrupt:
                raise
            except BaseException as exc:
                full = OutputWriteError.find(exc, out)  # a full disk, said as such
                running = rundir.read_summary()
                if running is not None and running.status == "running":  # not said why
                    status = "diverged" if isinstance(exc, NonFiniteLossError) else "failed"
                    with contextlib.suppress(OSError) if full else nullcontext():
                        rundir.write_summary(running | {
                            "status": status,
                            "error": f"{type(full or exc).__name__}: {full or exc}",
                            "ray_address": session.address})
                raise
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM; what the run started has stopped by now
        config = request.config if request.datasets is None else cfg
        raise _stopped(config, request.sets, cfg, rundir, address, summary) from None
    return summary


def _task_set(cfg: Config, task: Any, given: Any) -> list[str] | None:
    """The overrides that make a resume train the task given to ``pipeline.run(task=...)``:
    none when no task was given; None when it cannot be rebuilt from a name (no resume command:
    rerun ``pipeline.run`` with the same task and output)."""
    from pipeline.train.task import task_setting

    if given is None:
        return []
    setting = task_setting(task)
    if setting is None:
        return None
    return [f"train.task={setting}"] if setting != cfg.train.task else []


def _check_resumed_task(out: Path, task: Any) -> None:
    """A resume trains the task its checkpoints were made by, or is refused with the remedy."""
    from pipeline.job.runner import last_checkpoint
    from pipeline.train.task import task_name

    checkpoint = last_checkpoint(out)
    made_by, this = (checkpoint or {}).get("task"), task_name(task)
    if made_by and made_by != this:
        raise ConfigError([f"run.output ({str(out)!r}) holds checkpoints of task {made_by!r}, "
                           f"but this run trains {this!r}: resume with the same task "
                           f"(pipeline.run(task=...) or train.task) or choose another "
                           f"run.output"])


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


def _stopped(config: str | Path | dict | Config, sets: list[str], cfg: Config, rundir: RunDir,
             address: str | None, summary: RunSummary | None) -> RunStopped:
    """Write ``summary.json`` for a run stopped by a signal (unless it had finished and the stop
    came while Ray shut down) and return the :class:`RunStopped` to raise."""
    from pipeline.job.runner import last_checkpoint

    signum = received() or signal.SIGINT  # a plain KeyboardInterrupt: Ctrl-C
    out = rundir.path
    if summary is None:
        checkpoint = last_checkpoint(out)
        summary = RunSummary(
            status="stopped", signal=signal.Signals(signum).name, name=cfg.run.name,
            epochs=cfg.train.epochs, epochs_done=checkpoint["epoch"] if checkpoint else 0,
            # the latest checkpoint Ray Train registered: the rerun resumes from it
            checkpoint=checkpoint["path"] if checkpoint else None,
            resumes_at=({"epoch": checkpoint["epoch"] + 1, "after_step": checkpoint["step"]}
                        if checkpoint else None),
            resume=resume_command(config, sets, out), ray_address=address)
        rundir.write_summary(summary)
    return RunStopped(signum, out, summary)


def _link_ray_logs(session: Any, out: Path) -> None:
    """``RUN_DIR/ray-logs`` → this node's Ray worker logs (they stay off the console)."""
    logs, link = session.logs, out / "ray-logs"
    if link.is_symlink():  # a rerun into the same folder (resume): point at this session
        link.unlink()
    if logs and not link.exists():
        link.symlink_to(logs, target_is_directory=True)


def _with_breakdown(summary: RunSummary, clock: JobClock, rundir: RunDir) -> RunSummary:
    """The run's wall time and throughput from its start to Ray's shutdown, and where the time
    went: into summary.json and report.md."""
    rows = clock.breakdown()
    wall = sum(r["seconds"] for r in rows)
    summary = summary | {"wall_seconds": wall, "breakdown": rows,
                         "samples_per_second": summary.samples / wall if wall else 0.0}
    rundir.write_summary(summary)
    append_to_report(rundir.path / "report.md", rows)
    return summary
