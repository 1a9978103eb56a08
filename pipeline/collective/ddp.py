"""Wrapping a model in DDP so gradient all-reduce overlaps with backward.

DDP all-reduces gradients bucket by bucket as backward produces them; ``bucket_cap_mb`` sets
how early the first bucket can leave, ``gradient_as_bucket_view`` saves a copy per bucket, and
``static_graph`` lets DDP skip per-step bookkeeping. A comm hook (fp16/bf16 cast, PowerSGD)
shrinks what goes over the wire. The profiler times the all-reduce futures by passing a
``hook_wrapper``; with no hook configured it wraps torch's default all-reduce hook, which does
exactly what DDP does without a hook, so timing does not change the arithmetic.

Runs in: Train worker, after the process group exists (Ray Train creates it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook
from torch.nn.parallel import DistributedDataParallel

from pipeline.collective.config import CollectiveConfig
from pipeline.collective.process_group import collective_guard

logger = logging.getLogger(__name__)

Hook = Callable[[Any, dist.GradBucket], torch.futures.Future]
HookWrapper = Callable[[Hook, Any], tuple[Hook, Any]]


def _no_hook(config: CollectiveConfig) -> tuple[Hook | None, Any]:
    return None, None


def _fp16(config: CollectiveConfig) -> tuple[Hook | None, Any]:
    return default_hooks.fp16_compress_hook, None  # state None: the default group


def _bf16_compress(state, bucket):  # noqa: ANN001 - DDP inspects annotations; strings fail
    # DDP refuses torch's bf16 hook *by name* unless the backend is NCCL >= 2.10 (older NCCL
    # lacked bf16). gloo sums bf16 correctly, so the CPU path goes through this alias. No
    # annotations: DDP compares them to dist.GradBucket and postponed ones are strings.
    return default_hooks.bf16_compress_hook(state, bucket)


def _bf16(config: CollectiveConfig) -> tuple[Hook | None, Any]:
    return _bf16_compress, None


def _powersgd(config: CollectiveConfig) -> tuple[Hook | None, Any]:
    state = powerSGD_hook.PowerSGDState(
        process_group=None, matrix_approximation_rank=config.powersgd_rank,
        start_powerSGD_iter=config.powersgd_start_iter)
    return powerSGD_hook.powerSGD_hook, state


COMM_HOOKS: dict[str, Callable[[CollectiveConfig], tuple[Hook | None, Any]]] = {
    "none": _no_hook, "fp16": _fp16, "bf16": _bf16, "powersgd": _powersgd,
}


def wrap_ddp(model: torch.nn.Module, config: CollectiveConfig, *, device: torch.device | str,
             hook_wrapper: HookWrapper | None = None) -> DistributedDataParallel:
    """``model`` on ``device`` under DDP with ``config``'s buckets and comm hook."""
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            "wrap_ddp needs an initialised torch.distributed process group; Ray Train's "
            "TorchTrainer creates one in each worker, elsewhere call "
            "pipeline.collective.init_process_group first")
    if config.comm_hook not in COMM_HOOKS:
        raise ValueError(f"collective.comm_hook ({config.comm_hook!r}) must be one of "
                         f"{', '.join(COMM_HOOKS)}")
    device = torch.device(device)
    model = model.to(device)
    # DDP verifies and broadcasts parameters across ranks here: a peer that never arrives
    # surfaces at construction, so it is guarded like a training step.
    with collective_guard(config, what="DDP construction (parameter broadcast)"):
        ddp = DistributedDataParallel(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=config.bucket_cap_mb,
            gradient_as_bucket_view=config.gradient_as_bucket_view,
            static_graph=config.static_graph,
        )
    hook, state = COMM_HOOKS[config.comm_hook](config)
    if hook is None and hook_wrapper is not None:
        hook, state = default_hooks.allreduce_hook, None
    if hook_wrapper is not None:
        hook, state = hook_wrapper(hook, state)
    if hook is not None:
        ddp.register_comm_hook(state, hook)
    logger.info("DDP: bucket_cap_mb=%g gradient_as_bucket_view=%s static_graph=%s comm_hook=%s",
                config.bucket_cap_mb, config.gradient_as_bucket_view, config.static_graph,
                config.comm_hook)
    return ddp
