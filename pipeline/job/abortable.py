"""A Ray Train v2 trainer the driver can abort: Ctrl-C and SIGTERM stay Feedline's to handle.

Ray Train's ``fit()`` replaces the process's SIGINT handler with its own (abort the run, then
``sys.exit(0)``, which reaches the caller of ``fit()`` as a ``SystemExit`` from ``ray.get``) and
keeps no handle a caller could abort with. This trainer keeps the run's controller instead and
installs nothing, so :mod:`pipeline.cluster.stop` handles the signal and the driver aborts the
run through :meth:`AbortableTrainer.abort`. Driver side; built by ``pipeline.job.runner``.
"""

from __future__ import annotations

import logging
from typing import Any

import ray
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

logger = logging.getLogger(__name__)


class AbortableTrainer(DataParallelTrainer):
    """Ray Train's trainer for the run, whose run the driver stops with :meth:`abort` (main
    thread only: Ray Train hands over the controller where it would install its handler). What
    ``TorchTrainer`` is, given :class:`~pipeline.job.torch_backend.TorchBackendConfig` instead
    of ``TorchConfig`` (whose module, and ``TorchTrainer``'s, import torch)."""

    _controller: Any = None

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
