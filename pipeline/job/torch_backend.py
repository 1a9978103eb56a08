"""Ray Train's torch process-group set-up, without torch in Ray Train's controller.

Ray Train's ``TorchConfig`` lives in a module that imports torch, and the run's controller
unpickles it (its callbacks set the workers' process group up): the controller process imports
torch and ``ray.train.torch`` before it starts a single worker, 2.1 s of CPU on this 2-core
machine (``import`` of the controller alone: 1.6 s; with ``ray.train.torch.config``: 3.8 s), on
the serial path from ``fit()`` to the first training step. :class:`TorchBackendConfig` is the
same configuration in a torch-free module; its backend runs Ray's own worker-side functions
(``ray.train.torch.config``), imported on the workers, which import torch anyway.

Feedline always names the backend (``gloo`` or ``nccl``) and uses ``env://`` rendezvous, as
``TorchConfig`` does by default.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import ray
from ray._private import ray_constants
from ray.train._internal.utils import get_address_and_port
from ray.train.backend import Backend, BackendConfig
from ray.train.constants import (
    DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S,
    TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S,
)


def _ray_torch(name: str, /, **kwargs: Any) -> Any:
    """Call Ray Train's worker-side torch function ``name`` (runs on a Train worker)."""
    from ray.train.torch import config

    return getattr(config, name)(**kwargs)


def _rendezvous(addr: str, port: int) -> None:
    os.environ["MASTER_ADDR"] = addr
    os.environ["MASTER_PORT"] = str(port)


class _TorchContext:
    """Ray's ``TorchConfigContextManager`` (the CUDA device of the worker), built on entry."""

    def __enter__(self) -> None:
        from ray.train.torch.config import TorchConfigContextManager

        self._inner = TorchConfigContextManager()
        self._inner.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        return self._inner.__exit__(*exc)


class _TorchBackend(Backend):
    """``ray.train.torch.config._TorchBackend``'s set-up for a Ray Train v2 worker group."""

    share_cuda_visible_devices = True

    def on_start(self, worker_group: Any, backend_config: TorchBackendConfig) -> None:
        addr, port = worker_group.execute_single(0, get_address_and_port)
        worker_group.execute(_rendezvous, addr=addr, port=port)
        worker_group.execute(_ray_torch, "_set_torch_distributed_env_vars")
        ray.get([worker_group.execute_single_async(
            rank, _ray_torch, "_setup_torch_process_group", backend=backend_config.backend,
            world_rank=rank, world_size=len(worker_group), init_method="env://",
            timeout_s=backend_config.timeout_s) for rank in range(len(worker_group))])

    def on_shutdown(self, worker_group: Any, backend_config: TorchBackendConfig) -> None:
        futures = worker_group.execute_async(_ray_torch, "_shutdown_torch",
                                             destroy_process_group=len(worker_group) > 1)
        try:
            ray.get(futures, timeout=ray_constants.env_integer(
                TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S,
                DEFAULT_TORCH_PROCESS_GROUP_SHUTDOWN_TIMEOUT_S))
        except ray.exceptions.GetTimeoutError:
            pass  # as Ray's: the workers are going anyway


@dataclass
class TorchBackendConfig(BackendConfig):
    """``TorchConfig(backend=..., timeout_s=...)`` that Ray Train's controller can unpickle
    without importing torch."""

    backend: str
    timeout_s: int = 1800

    @property
    def backend_cls(self) -> type[Backend]:
        return _TorchBackend

    @property
    def train_func_context(self) -> type[_TorchContext]:
        return _TorchContext

    @property
    def framework(self) -> Any:
        from ray.train.v2._internal.util import TrainingFramework

        return TrainingFramework.TORCH

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "init_method": "env", "timeout_s": self.timeout_s}
