"""A Ray Train v2 trainer the driver can abort: Ctrl-C and SIGTERM stay Feedline's to handle.

Ray Train's ``fit()`` replaces the process's SIGINT handler with its own (abort the run, then
``sys.exit(0)``, which reaches the caller of ``fit()`` as a ``SystemExit`` from ``ray.get``) and
keeps no handle a caller could abort with. This trainer keeps the run's controller instead and
installs nothing, so :mod:`pipeline.cluster.stop` handles the signal and the driver aborts the
run through :meth:`AbortableTrainer.abort`. Driver side; built by ``pipeline.job.runner``.

Ray Train also starts a detached ``PlacementGroupCleaner`` actor per run, which removes the
worker group's placement group should the controller die without doing so: a process and about
2 s of CPU per run, on the way to the first step. Here the controller tells the run's inbox
(:class:`~pipeline.job.inbox.RunInbox`) each placement group it makes, and the driver removes
what is left of them when ``fit()`` ends (:meth:`AbortableTrainer.release`). When the driver
dies as well, its job ends, and Ray removes the job's placement groups with it.

Ray Train gives its controller the driver's ``RAY_TRAIN_*`` settings as a runtime env, and an
actor with a runtime env never takes one of the workers Ray starts ahead of need, which have
none (Ray #47212), and its process starts through ``setup_worker.py``, one more Python start and
import of Ray. The controller's runtime env was inherited by the helpers it starts (Ray Train's
and Ray Data's), and its workers got one too. Here the controller and the workers set those
variables in their own processes instead (:class:`TrainController`, :class:`WorkerGroup`).
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

import ray
from ray._common.constants import RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR
from ray.train.v2._internal.callbacks.placement_group_callback import (
    PlacementGroupCleanerCallback,
)
from ray.train.v2._internal.constants import (
    DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE,
    get_env_vars_to_propagate,
)
from ray.train.v2._internal.execution.callback import WorkerGroupCallback
from ray.train.v2._internal.execution.controller import TrainController as RayTrainController
from ray.train.v2._internal.execution.worker_group import WorkerGroup as RayWorkerGroup
from ray.train.v2._internal.execution.worker_group.worker import RayTrainWorker as RayWorker
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
from ray.util.placement_group import placement_group_table, remove_placement_group

logger = logging.getLogger(__name__)


class AbortableTrainer(DataParallelTrainer):
    """Ray Train's trainer for the run, whose run the driver stops with :meth:`abort` (main
    thread only: Ray Train hands over the controller where it would install its handler). What
    ``TorchTrainer`` is, given :class:`~pipeline.job.torch_backend.TorchBackendConfig` instead
    of ``TorchConfig`` (whose module, and ``TorchTrainer``'s, import torch)."""

    _controller: Any = None

    def __init__(self, *args: Any, inbox: Any, **kwargs: Any) -> None:
        self._inbox = inbox  # the RunInbox the controller tells its placement groups
        super().__init__(*args, **kwargs)

    def _create_default_callbacks(self) -> list[Any]:  # Ray Train's hook (2.60)
        kept = [c for c in super()._create_default_callbacks()
                if not isinstance(c, PlacementGroupCleanerCallback)]
        return [*kept, _PlacementGroupsToInbox(self._inbox)]

    def release(self) -> None:
        """Remove the worker groups' placement groups the controller left (it died without
        removing them); those it removed are skipped. Call when ``fit()`` has ended."""
        try:
            for group in ray.get(self._inbox.placement_groups.remote(), timeout=30):
                if placement_group_table(group).get("state", "REMOVED") != "REMOVED":
                    logger.warning("Ray Train's controller left its placement group %s; "
                                   "removing it", group.id.hex())
                    remove_placement_group(group)
        except Exception as exc:  # noqa: BLE001 - never hides the run's own outcome
            logger.warning("could not check the run's placement groups: %s", exc)

    def _initialize_and_run_controller(self, **init: Any) -> Any:  # Ray Train's hook (2.60)
        """Ray Train's own, but the controller gets its environment as an argument, not as a
        runtime env."""
        env_vars = get_env_vars_to_propagate()
        env_vars.setdefault(RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_ENV_VAR,
                            DEFAULT_RAY_WARN_BLOCKING_GET_INSIDE_ASYNC_VALUE)
        here = {ray._raylet.RAY_NODE_ID_KEY: ray.get_runtime_context().get_node_id()}
        controller = ray.remote(num_cpus=0, label_selector=here)(TrainController).remote(
            env_vars, **init)
        if threading.current_thread() is threading.main_thread():
            self._register_sigint_handler(controller)
        ray.get(controller.run.remote())
        return ray.get(controller.get_result.remote())

    def _register_sigint_handler(self, controller: Any) -> None:  # Ray Train's hook (2.60)
        self._controller = controller

    def abort(self, timeout_s: float = 30.0) -> None:
        """Stop the Train workers, and the Ray Data executions they drive, as Ray Train's own
        Ctrl-C does; the checkpoints registered so far stay for a rerun to resume from."""
        if self._controller is None:  # fit() never started the run
            return
        try:
            ray.get(self._controller.abort.remote(), timeout=timeout_s)
        except ray.exceptions.RayActorError:
            pass  # the controller exits at the end of its abort: the expected outcome
        except ray.exceptions.GetTimeoutError:
            logger.warning("Ray Train's controller did not abort within %g s; the workers go "
                           "when the driver leaves Ray", timeout_s)


class _PlacementGroupsToInbox(WorkerGroupCallback):
    """Runs in Ray Train's controller: tells the run's inbox each worker group's placement
    group once the group has started."""

    def __init__(self, inbox: Any) -> None:
        self.inbox = inbox

    def after_worker_group_start(self, worker_group: Any) -> None:
        group = worker_group.get_worker_group_state().placement_group_handle.placement_group
        ray.get(self.inbox.add_placement_group.remote(group), timeout=30)


class RayTrainWorker(RayWorker):
    """Ray Train's worker, with the environment variables its worker group gives it (Ray
    Train's settings, Feedline's NCCL/gloo advice) set in its own process before anything reads
    them (:class:`WorkerGroup` sets them on a subclass of it for each group)."""

    env_vars: dict[str, str] = {}

    def __init__(self) -> None:
        os.environ.update(self.env_vars)
        super().__init__()


class WorkerGroup(RayWorkerGroup):
    """Ray Train's worker group, whose workers get their environment variables in their own
    process rather than as a runtime env."""

    def _get_worker_runtime_env(self, custom_runtime_env: dict) -> dict:  # Ray Train's (2.60)
        runtime_env = dict(RayWorkerGroup._get_worker_runtime_env(custom_runtime_env))
        env_vars = runtime_env.pop("env_vars", {})
        # the class Ray Train starts right after asking for the runtime env
        self._worker_cls = type("RayTrainWorker", (RayTrainWorker,), {"env_vars": env_vars})
        return runtime_env


class TrainController(RayTrainController):
    """Ray Train's controller, with the environment variables Ray Train would give it as a
    runtime env set in its own process, before Ray Train reads them; its workers get theirs
    the same way (:class:`WorkerGroup`)."""

    worker_group_cls = WorkerGroup

    def __init__(self, env_vars: dict[str, str], **init: Any) -> None:
        os.environ.update(env_vars)
        super().__init__(**init)
