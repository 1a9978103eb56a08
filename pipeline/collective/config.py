"""Config of the collective stage (process group, DDP, NCCL settings)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config.options import option


@dataclass(frozen=True, kw_only=True)
class CollectiveConfig:
    """How gradients move between Train workers."""

    backend: Literal["auto", "nccl", "gloo"] = option(
        "auto", "process-group backend: auto picks nccl with GPUs, gloo otherwise")
    timeout_s: float = option(600.0, "collective timeout; a hung peer becomes an error after it",
                              gt=0)
    bucket_cap_mb: float = option(25.0, "DDP gradient bucket size in MiB", gt=0)
    gradient_as_bucket_view: bool = option(True, "gradients alias DDP buckets (saves a copy)")
    static_graph: bool = option(False, "tell DDP the graph never changes between steps")
    comm_hook: Literal["none", "fp16", "bf16", "powersgd"] = option(
        "none", "DDP communication hook compressing gradients before all-reduce")
    apply_nccl_advice: bool = option(True, "pass the advised NCCL_* env to Train workers")
    probe: bool = option(True, "after training, time a short all-reduce and flag a link far "
                               "below its class (e.g. NCCL on sockets instead of RDMA)")
    powersgd_rank: int = option(1, "PowerSGD low-rank approximation rank (comm_hook: powersgd)",
                                ge=1, hint="1 compresses most; raise it if accuracy suffers")
    powersgd_start_iter: int = option(
        1000, "plain all-reduce steps before PowerSGD compression starts", ge=2,
        hint="PowerSGD's error feedback needs at least 2 warm-up steps")
