"""Config of the profiler: what to record and the thresholds of the diagnosis.

The thresholds are read by :func:`pipeline.profile.diagnose`; the ordering and borderline rules
that combine them are documented in :mod:`pipeline.profile.diagnosis`.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.options import option


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """Per-step spans on every rank and the thresholds used to name the bottleneck."""

    enabled: bool = option(True, "record per-step spans on every rank")
    input_bound_fraction: float = option(
        0.2, "data_wait share of step time above which the run is input-bound", ge=0, le=1)
    comm_bound_fraction: float = option(
        0.25, "exposed all-reduce share of step time above which it is communication-bound",
        ge=0, le=1)
    transfer_bound_fraction: float = option(
        0.2, "h2d share of step time above which the run is transfer-bound", ge=0, le=1)
    straggler_ratio: float = option(
        1.25, "a rank this many times slower than the median step is a straggler", gt=1)
    data_busy_fraction: float = option(
        0.8, "preprocessing busy share above which it counts as saturated (advice: add capacity)",
        ge=0, le=1)
    trace_steps: int = option(
        200, "recent steps per rank kept for timeline.json (memory stays bounded)", ge=0,
        hint="use 0 to write no per-step events")
    nvtx: bool = option(True, "on CUDA, also push each span as an NVTX range for Nsight Systems")
