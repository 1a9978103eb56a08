"""Process-group set-up with an explicit timeout, and turning a hang into a clear error.

Ray Train creates the process group in its workers: ``pipeline run`` passes
``collective.timeout_s`` as ``TorchBackendConfig(timeout_s=...)``
(:mod:`pipeline.job.torch_backend`), your own ``TorchTrainer`` takes ``TorchConfig(timeout_s=...)``.
:func:`init_process_group` is for loops outside Ray Train (the bench actors, tests, a plain
torchrun script). With gloo a peer that never arrives makes the
waiting rank raise "Timed out waiting ...ms" after the timeout; :func:`collective_guard` turns
that into :class:`CollectiveTimeoutError`, naming the config key. NCCL's watchdog aborts the
process on a timeout instead; its log names the collective.

Runs in: Train worker, bench actor.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

import torch
import torch.distributed as dist

from pipeline.collective.backend import choose_backend
from pipeline.collective.config import CollectiveConfig
from pipeline.errors import CollectiveTimeoutError

logger = logging.getLogger(__name__)


def init_process_group(config: CollectiveConfig, *, rank: int, world_size: int,
                       init_method: str, has_gpu: bool | None = None) -> tuple[str, str]:
    """Join the default group with ``config``'s backend and timeout; ``(backend, reason)``."""
    has_gpu = torch.cuda.is_available() if has_gpu is None else has_gpu
    backend, reason = choose_backend(config, has_gpu)
    with collective_guard(config, what=f"rendezvous at {init_method}"):
        dist.init_process_group(backend, init_method=init_method, rank=rank,
                                world_size=world_size,
                                timeout=timedelta(seconds=config.timeout_s))
    logger.info("rank %d/%d joined the process group: %s (%s)", rank, world_size, backend, reason)
    return backend, reason


@contextmanager
def collective_guard(config: CollectiveConfig, *, what: str = "collective") -> Iterator[None]:
    """Re-raise a collective timeout inside the block as :class:`CollectiveTimeoutError`."""
    start = time.monotonic()
    try:
        yield
    except RuntimeError as exc:  # gloo and the TCP store raise RuntimeError subclasses
        text = str(exc).lower()
        if isinstance(exc, CollectiveTimeoutError) or not ("timed out" in text
                                                          or "timeout" in text):
            raise
        waited = time.monotonic() - start
        rank = dist.get_rank() if dist.is_initialized() else "?"
        raise CollectiveTimeoutError(
            f"{what} on rank {rank} waited {waited:.1f} s for a peer that never joined "
            f"(collective.timeout_s = {config.timeout_s:g}); another rank has probably crashed "
            "or is stuck: check its log. Raise collective.timeout_s only if a step legitimately "
            f"takes that long. Cause: {str(exc).strip()[:300]}") from exc
