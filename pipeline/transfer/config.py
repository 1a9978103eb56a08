"""Config of the transfer stage (host batches → device), declared next to the stage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipeline.config.options import option


@dataclass(frozen=True, kw_only=True)
class TransferConfig:
    """How each Train worker moves host batches onto its device."""

    host_prefetch: int = option(2, "host (CPU) batches each trainer's iterator prefetches from "
                                   "its Ray Data shard", ge=0)
    gpu_prefetch: int = option(2, "batches in flight on the device side (K)", ge=1,
                               hint="use 1 to disable overlap")
    stall_timeout_s: float = option(300.0, "a trainer that receives no batch for this long "
                                           "stops with an error instead of hanging", gt=0)
    pin_memory: bool | Literal["auto"] = option(
        "auto", "page-lock the staging buffers: auto (when CUDA is present), true or false")
    ship_uint8: bool = option(True, "images travel as uint8 (4x fewer bytes through the object "
                                    "store and over PCIe) and are normalised on the device")
    min_pin_bytes: int = option(1 << 20, "batches smaller than this are not pinned", ge=0)
    copy_threads: int = option(
        0, "threads for the host copy of fields >= 4 MiB; 0 picks up to 8 from the CPU count",
        ge=0)
