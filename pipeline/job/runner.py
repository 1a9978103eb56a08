"""Assembling and running one Feedline job on the connected Ray cluster (driver side).

plan resources → build datasets → TorchTrainer(fit) while the progress monitor drains the
reporter → copy the checkpoint, write quarantine and summary (with the epochs an earlier, stopped
run into the same directory finished). Ctrl-C or SIGTERM during ``fit()`` aborts the Train run
(:class:`~pipeline.job.abortable.AbortableTrainer`). Nothing here runs on workers.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from pipeline.cluster.planner import ResourcePlan, plan_resources, pool_cpus
from pipeline.collective import choose_backend
from pipeline.config import Config
from pipeline.data import DataPlan, build_datasets
from pipeline.data.accounting import account_epoch
from pipeline.data.quarantine import check_bad_fraction, write_quarantine
from pipeline.data.sources import SourcePlan, skipped_fields
from pipeline.data.udf.reader import ReaderSpec
from pipeline.errors import (
    BadSampleThresholdError,
    ConfigError,
    NonFiniteLossError,
    OutputWriteError,
)
from pipeline.job.breakdown import JobClock
from pipeline.job.delivered import EPOCHS_DIR, discard, merge_earlier, write_delivered
from pipeline.job.inbox import RunInbox
from pipeline.job.network import nccl_advice
from pipeline.job.outputs import sum_transfer, write_profile
from pipeline.job.progress import ProgressMonitor
from pipeline.job.rundir import RunDir
from pipeline.job.summary import RunSummary
from pipeline.pool.controller import PoolController
from pipeline.train.spec import WorkerSpec, run_worker

logger = logging.getLogger(__name__)


def _on_this_node() -> dict[str, Any]:
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    node = ray.get_runtime_context().get_node_id()
    return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node_id=node, soft=False)}


# Ray Train's controller polls its workers every 2 s by default, and a worker's report waits in
# a queue of one until the next poll: every epoch-end checkpoint of a short epoch waited up to
# 2 s, and fit() returned up to 2 s after training ended (measured: 1.3 s per epoch, 5.7 s at
# the end of the quickstart). A quarter second costs the controller a few cheap polls.
CONTROLLER_POLL_S = 0.25
_POLL_ENV = "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"  # propagated by Ray Train to its controller


@contextlib.contextmanager
def _controller_poll(seconds: float):
    """Set Ray Train's controller poll interval for one ``fit()``, unless the user set it."""
    if _POLL_ENV in os.environ:
        yield
        return
    os.environ[_POLL_ENV] = str(seconds)
    try:
        yield
    finally:
        os.environ.pop(_POLL_ENV, None)


def _trainer(config: Config, plan: ResourcePlan, data: DataPlan, spec: WorkerSpec,
             env: dict[str, str], backend: str, output: Path, board: Any):
    """Ray Train's trainer for this job: workers, placement, failures, data budget."""
    import ray
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig

    from pipeline.job.abortable import AbortableTrainer
    from pipeline.job.split import EveryValidationRow
    from pipeline.job.torch_backend import TorchBackendConfig

    train = config.train
    if train.deterministic and plan.use_gpu:  # cuBLAS needs this for deterministic matmuls
        env = {"CUBLAS_WORKSPACE_CONFIG": ":4096:8"} | env
    datasets = {"train": data.train} | ({"val": data.val} if data.val is not None else {})
    return AbortableTrainer(
        run_worker,
        inbox=board,
        # a reference: Ray Train's controller keeps the loop's config, and unpickling the spec
        # there (a task of the user's imports torch) would delay every worker's start
        train_loop_config={"spec": ray.put(spec)},
        backend_config=TorchBackendConfig(backend=backend,
                                          timeout_s=int(config.collective.timeout_s)),
        scaling_config=ScalingConfig(
            num_workers=train.num_workers, use_gpu=plan.use_gpu,
            resources_per_worker={"CPU": train.cpus_per_worker, **train.placement.resources},
            label_selector=dict(train.placement.labels) or None),
        run_config=RunConfig(
            name="train", storage_path=str(output.resolve() / "ray"),
            worker_runtime_env={"env_vars": env},
            failure_config=FailureConfig(max_failures=train.max_failures),
            checkpoint_config=CheckpointConfig(num_to_keep=train.keep_checkpoints)),
        datasets=datasets,
        dataset_config=EveryValidationRow(execution_options=_execution_options(config, plan,
                                                                               data, board)),
    )


def _execution_options(config: Config, plan: ResourcePlan, data: DataPlan,
                       board: Any) -> dict[str, Any]:
    """Each dataset's Ray Data options. Ray Data's budget is what the trainers leave: the two
    never compete for CPUs. Kept block order makes streaming_split hand every rank the same
    rows in every run. With ``data.autoscale`` the training set's CPU limit is the pool
    controller's, read live from ``board`` (:mod:`pipeline.pool.live_limits`)."""
    from ray.data import ExecutionOptions, ExecutionResources

    common = {"resource_limits": ExecutionResources(cpu=plan.data_cpus),
              "preserve_order": config.train.deterministic or data.keep_order}
    options = {"train": ExecutionOptions(**common), "val": ExecutionOptions(**common)}
    if config.data.elastic:
        from pipeline.pool.live_limits import LiveLimits

        # the controller's limit replaces the static one: preprocessing nodes may join
        options["train"] = LiveLimits(board=board, **common | {"resource_limits":
                                                                 ExecutionResources()})
    return options


def last_checkpoint(output: Path, *, check: bool = False) -> dict[str, Any] | None:
    """The checkpoint a rerun into ``output`` resumes from: the latest one Ray Train registered
    (its snapshot under ``RUN_DIR/ray/train``), with the epoch and step it holds. ``check``
    (once, when a rerun claims the folder): refuse a damaged one (:func:`check_checkpoint`).

    While the run goes on, Ray Train registers newer checkpoints and deletes older ones
    (``num_to_keep``): a snapshot read just before names a folder that is gone. It is read
    again then; a folder still missing after :data:`SNAPSHOT_READS` reads counts as none."""
    snapshot = output / "ray" / "train" / "checkpoint_manager_snapshot.json"
    for _ in range(SNAPSHOT_READS):
        if not snapshot.exists():
            return None
        latest = json.loads(snapshot.read_text()).get("latest_checkpoint_result")
        if not latest:
            return None
        from pipeline.train.checkpoint import META_FILE  # imports torch: only for a rerun

        path = snapshot.parent / latest["checkpoint_dir_name"]
        if check:
            check_checkpoint(path, f"run.output ({str(output)!r})")
        try:
            meta = json.loads((path / META_FILE).read_text())
        except FileNotFoundError:
            continue  # deleted after the snapshot was read: the snapshot has moved on
        return {"path": str(path), "epoch": meta["epoch"], "step": meta["step"],
                "task": meta.get("task")}
    return None


SNAPSHOT_READS = 3


# A stop keeps the epoch the ranks just reported: its checkpoint is written right after, and
# Ray Train's controller registers it at its next poll (CONTROLLER_POLL_S); aborting before that
# lost it (a Ctrl-C in the first moments of validation). The wait is bounded: a second signal
# stops at once, and a controller that is gone never registers anything.
KEEP_EPOCH_S = 5.0


def await_checkpoint(output: Path, epoch: int, *, timeout_s: float = KEEP_EPOCH_S,
                     clock: Any = time.monotonic, sleep: Any = time.sleep) -> bool:
    """Wait until Ray Train has registered a checkpoint of ``epoch`` (or later) in
    ``output``: True, or False once ``timeout_s`` passed without one."""
    deadline = clock() + timeout_s
    while True:
        latest = last_checkpoint(output)
        if latest is not None and latest["epoch"] >= epoch:
            return True
        if clock() >= deadline:
            return False
        sleep(0.05)


def check_checkpoint(path: Path, where: str) -> None:
    """Refuse, before Ray starts, a checkpoint a resume would die on in the workers: a
    ``meta.json`` that is not the JSON a checkpoint writes, a ``model.pt`` torch cannot open."""
    import torch

    from pipeline.train.checkpoint import META_FILE, STATE_FILE

    remedy = (f"remove {path} to resume from the checkpoint before it, or choose another "
              f"run.output")
    try:
        meta = json.loads((path / META_FILE).read_text())
        if not isinstance(meta, dict) or not {"epoch", "step"} <= meta.keys():
            raise ValueError("no epoch and step in it")
    except (OSError, ValueError) as exc:
        raise ConfigError([f"{where}: the checkpoint to resume from is damaged: "
                           f"{path / META_FILE}: {exc}; {remedy}"]) from None
    try:  # mmap: the file's structure is checked, its tensors are not read
        torch.load(path / STATE_FILE, map_location="cpu", weights_only=True, mmap=True)
    except Exception as exc:  # noqa: BLE001 - torch raises many kinds for a damaged file
        raise ConfigError([f"{where}: the checkpoint to resume from is damaged: "
                           f"{path / STATE_FILE}: {type(exc).__name__}: {exc}; "
                           f"{remedy}"]) from None


def _exactly_once(accounting: list[dict[str, Any]], epochs: int) -> bool | None:
    """Every epoch of the run accounted, none losing or repeating a sample; None when the ids
    are not known on the driver (parquet with an ``id_column``)."""
    if not accounting:
        return None
    return ({a["epoch"] for a in accounting} == set(range(1, epochs + 1))
            and all(a["lost"] == 0 and a["duplicated"] == 0 for a in accounting))


@dataclass(frozen=True)
class Job:
    """What the driver decided for one run before any worker starts."""

    config: Config
    output: Path
    plan: ResourcePlan
    backend: str
    backend_reason: str
    network: dict[str, Any]  # nccl_advice: env, rank_plans, advice
    data: DataPlan
    task: Any


def run_job(config: Config, output: Path, *, ray_address: str, console: Console,
            clock: JobClock, show_progress: bool = True,
            source: tuple[SourcePlan, ReaderSpec] | None = None,
            task: Any = None, datasets: Any = None) -> RunSummary:
    """Train ``config`` on the connected cluster; returns the summary (also in summary.json).
    ``clock`` gets the job's milestones; the caller adds Ray's shutdown and the breakdown.
    ``source`` is the data source the caller planned before starting Ray, if it did. ``task``
    (a :class:`~pipeline.train.task.Task`) replaces ``train.task``; either is resolved here,
    so a task that cannot be imported fails before any worker starts. ``datasets`` are the
    Ray Datasets of a ``ray`` source given to ``pipeline.run``.

    plan → datasets → fit (the progress monitor and the decode pool's controller beside it)
    → summary."""
    import ray

    from pipeline.train.task import resolve_task

    plan, backend, backend_reason = _resources(config, console)
    # the run's one actor: the workers' messages, the pool's limit and the quarantine
    reporter = RunInbox.options(**_on_this_node()).remote(config.run.name)
    data = build_datasets(config.data, ship_uint8=config.transfer.ship_uint8,
                          quarantine=reporter, source=source, datasets=datasets,
                          pulse=reporter if config.data.ours else None,
                          reshuffle=not config.train.deterministic, val_in_rank=True)
    _say_data(config, data, console)
    job = Job(config=config, output=output, plan=plan, backend=backend,
              backend_reason=backend_reason, network=nccl_advice(config), data=data,
              task=resolve_task(task if task is not None else config.train.task))
    pool = (PoolController(config.data, reporter, run=config.run.name,
                           metrics_path=output / "metrics.jsonl", console=console,
                           world_size=config.train.num_workers, train_cpus=job.plan.train_cpus,
                           act=config.data.elastic, run_epochs=config.train.epochs,
                           rows_per_epoch=job.data.num_train)
            if config.data.ours else None)
    with ProgressMonitor(reporter, epochs=config.train.epochs,
                         samples_per_epoch=job.data.num_train,
                         world_size=config.train.num_workers,
                         metrics_path=output / "metrics.jsonl", console=console,
                         show=show_progress,
                         delivered_dir=output / EPOCHS_DIR, pool=pool) as monitor:
        clock.mark("fit_started")
        result = _fit(job, reporter, monitor, pool)
    if monitor.write_error is not None:  # ids or lines missing from the folder: no success
        raise OutputWriteError.of(monitor.write_error, output)
    clock.mark("fit_done")
    clock.worker = monitor.worker_marks
    clock.epochs = monitor.epoch_metrics
    bad = ray.get(reporter.records.remote(), timeout=60)
    write_quarantine(bad, output / "quarantine.jsonl")
    summary = _summary(job, result, monitor, pool, bad, ray_address=ray_address,
                       wall=clock.marks["fit_done"] - clock.marks["process_start"])
    if monitor.probe and monitor.probe["warning"]:
        console.print(f"[yellow]link[/]: {monitor.probe['warning']}")
    if monitor.profiles:
        summary |= write_profile(config, output, monitor,
                                 device="cuda" if job.plan.use_gpu else "cpu",
                                 data_cpus=job.plan.data_cpus)
        console.print(f"[bold]diagnosis[/]: {summary.diagnosis['verdict']}")
        for advice in summary.diagnosis["advice"]:
            console.print(f"  - {advice}")
    try:
        check_bad_fraction(len(bad), job.data.num_train + job.data.num_val,
                           config.data.max_bad_fraction, job.data.origin, bad)
    except RuntimeError as exc:
        summary |= {"status": "failed", "error": str(exc)}
        raise
    finally:
        RunDir(output).write_summary(summary)
    discard(output / EPOCHS_DIR)  # delivered.npz holds every epoch now
    return summary


def _resources(config: Config, console: Console) -> tuple[ResourcePlan, str, str]:
    """CPUs and GPUs for the trainers and for preprocessing, and the collective backend (a
    :class:`~pipeline.errors.PlanError` for a plan that would starve either)."""
    import ray

    resources = ray.cluster_resources()
    plan = plan_resources(
        cluster_cpus=resources.get("CPU", 0.0), cluster_gpus=resources.get("GPU", 0.0),
        num_workers=config.train.num_workers, cpus_per_worker=config.train.cpus_per_worker,
        use_gpu=config.train.use_gpu, data_min_actors=config.data.concurrency[0],
        cpus_per_actor=config.data.cpus_per_actor,
        data_pool_cpus=pool_cpus(config.data.placement),
        train_pool_cpus=pool_cpus(config.train.placement),
        cluster_memory=resources.get("memory"))
    backend, reason = choose_backend(config.collective, plan.use_gpu)
    console.print(f"[bold]plan[/]: {plan.train_cpus:g} CPUs for {config.train.num_workers} Train "
                  f"workers, {plan.data_cpus:g} for preprocessing; {plan.gpu_reason}; "
                  f"backend {backend}")
    return plan, backend, reason


def _say_data(config: Config, data: DataPlan, console: Console) -> None:
    what = (f"{len(data.classes)} classes" if data.classes
            else f"input {data.field!r} {list(data.sample_shape)}")
    console.print(f"[bold]data[/]: {data.num_train:,} train / {data.num_val:,} validation samples, "
                  f"{what} from {data.origin}")
    share = data.num_train // config.train.num_workers
    if config.train.batch_size > share:
        console.print(f"[yellow]warning[/]: train.batch_size ({config.train.batch_size}) is more "
                      f"than each of the {config.train.num_workers} ranks' share of the training "
                      f"split ({share} samples): every epoch is one short step per rank; lower "
                      f"train.batch_size")


def _fit(job: Job, reporter: Any, monitor: ProgressMonitor,
         pool: PoolController | None) -> Any:
    """Ray Train's ``fit()``; a failure is said for what it is: a diverged loss, a bad-sample
    threshold the readers hit (with the quarantine written first), else Ray's error."""
    import ray

    config, data = job.config, job.data
    spec = WorkerSpec(config=config, field=data.field, sample_shape=data.sample_shape,
                      num_classes=len(data.classes), use_gpu=job.plan.use_gpu,
                      has_val=data.has_val, reporter=reporter, val_slices=data.val_slices,
                      num_train=data.num_train, num_val=data.num_val, task=job.task,
                      row_bytes=data.row_bytes, rank_plans=job.network["rank_plans"])
    trainer = _trainer(config, job.plan, data, spec, job.network["env"], job.backend,
                       job.output, reporter)
    try:
        with _controller_poll(CONTROLLER_POLL_S):
            return trainer.fit()
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM (pipeline.cluster.stop)
        monitor.drain()
        if monitor.last_epoch and not await_checkpoint(job.output, monitor.last_epoch):
            logger.warning("epoch %d's checkpoint was not registered within %g s of the stop: "
                           "a rerun resumes from the one before", monitor.last_epoch,
                           KEEP_EPOCH_S)
        trainer.abort()
        raise
    except Exception as exc:
        monitor.drain()
        if monitor.diverged:  # a rank's loss went NaN: said whole, not as a worker failure
            raise NonFiniteLossError(monitor.diverged) from exc
        # Ray truncates worker tracebacks; a threshold the readers hit is reported whole.
        reason = ray.get(reporter.failure.remote(), timeout=30)
        if reason:  # the quarantine says which files to fix: write it before stopping
            write_quarantine(ray.get(reporter.records.remote(), timeout=60),
                             job.output / "quarantine.jsonl")
            raise BadSampleThresholdError(reason) from exc
        raise
    finally:
        trainer.release()  # a worker group's placement group its controller left
        if pool is not None:
            pool.close()  # no autoscaler request outlives the run


def _summary(job: Job, result: Any, monitor: ProgressMonitor, pool: PoolController | None,
             bad: list[dict[str, Any]], *, ray_address: str, wall: float) -> RunSummary:
    """``summary.json``'s content: what the run did, the checkpoint copied beside it, and the
    accounting of every epoch (with those an earlier, stopped run into the folder finished)."""
    from pipeline.train.task import task_name

    config, data, output = job.config, job.data, job.output
    checkpoint_dir = output / "checkpoint"
    if result.checkpoint is not None:
        with result.checkpoint.as_directory() as src:
            shutil.copytree(src, checkpoint_dir, dirs_exist_ok=True)
    final = monitor.epoch_metrics[-1] if monitor.epoch_metrics else dict(result.metrics or {})
    samples = sum(m["samples"] for m in monitor.epoch_metrics)
    steady_seconds = sum(m["epoch_seconds"] - m["first_batch_seconds"]
                         for m in monitor.epoch_metrics)
    quarantined = [r["id"] for r in bad]
    # this run's epochs, and those an earlier run into this directory finished before it stopped
    delivered, resumed_ids = merge_earlier(output / EPOCHS_DIR, config.train.epochs,
                                           monitor.delivered, monitor.resumed_ids)
    before_restart = np.empty(0, np.int64)
    accounting = ([account_epoch(data.train_ids, [*delivered[e].values(),
                                                  resumed_ids.get(e, before_restart)],
                                 quarantined=quarantined,
                                 world_size=config.train.num_workers)
                   | {"epoch": e} for e in delivered]
                  if data.train_ids is not None else [])
    write_delivered(output / "delivered.npz", delivered, resumed_ids)
    return RunSummary(
        status="succeeded",
        name=config.run.name,
        epochs=config.train.epochs,
        samples=samples,
        # what the user waited for: samples over the job's wall time, start-up included
        # (wall: to the end of fit; the caller sets its final value after Ray's shutdown)
        samples_per_second=samples / wall if wall else 0.0,
        # inside epochs, without each epoch's first-batch wait
        steady_samples_per_second=samples / steady_seconds if steady_seconds else 0.0,
        wall_seconds=wall,
        cache=final.get("cache"),
        num_workers=config.train.num_workers,
        task=task_name(job.task),
        val_accuracy=final.get("val_accuracy"),
        # the task's validation metrics (val_accuracy, val_samples for classification)
        val_metrics={k: v for k, v in final.items() if k.startswith("val_")},
        train_loss=final.get("train_loss"),
        ray_address=ray_address,
        backend=job.backend,
        collective={"backend": job.backend, "reason": job.backend_reason, **job.network,
                    # what each worker applied of rank_plans (ranks.apply_rank_plan)
                    "received": {str(r): p for r, p in sorted(monitor.nccl_received.items())},
                    "probe": monitor.probe},
        transfer=sum_transfer(monitor.transfer),
        straggler=final.get("straggler"),
        plan=job.plan.as_dict(),
        autoscale=pool.summary() if pool is not None else {"enabled": False},
        data={"origin": data.origin, "classes": list(data.classes),
              "num_train": data.num_train, "num_val": data.num_val},
        bad_samples=len(bad),
        **skipped_fields(data.skipped),
        restarts=max(0, len(monitor.attempts) - 1),
        resumed_from=[a for a in monitor.attempts if a],
        accounting=accounting,
        exactly_once=_exactly_once(accounting, config.train.epochs),
        checkpoint=str(checkpoint_dir) if result.checkpoint is not None else None,
    )
