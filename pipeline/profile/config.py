"""Config of the profiler: what to record and the thresholds of the diagnosis.

The thresholds are read by :func:`pipeline.profile.diagnose`; the ordering and borderline rules
that combine them are documented in :mod:`pipeline.profile.diagnosis`. Shares are of the
*training phase*: every second from the first epoch's start-up to the last checkpoint, on each
rank (see :mod:`pipeline.profile.merge` for how the costs are counted).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.options import option


@dataclass(frozen=True, kw_only=True)
class ProfileConfig:
    """Per-step spans on every rank and the thresholds used to name the bottleneck."""

    enabled: bool = option(True, "record per-step and per-epoch spans on every rank")
    min_explained_fraction: float = option(
        0.85, "share of the training phase the named phases must explain for a verdict; "
              "below it the verdict is `inconclusive` and says where the rest sits",
        ge=0, le=1)
    input_bound_fraction: float = option(
        0.2, "input share of the training phase (data_wait, plus the all-reduce time peers "
             "spent waiting for it) above which the run is input-bound", ge=0, le=1)
    startup_bound_fraction: float = option(
        0.3, "epoch start-up share of the training phase (waiting for each epoch's first "
              "batch) above which the run is startup-bound", ge=0, le=1)
    comm_bound_fraction: float = option(
        0.25, "exposed all-reduce share of the training phase (not counting waits for peers' "
              "input) above which it is communication-bound", ge=0, le=1)
    transfer_bound_fraction: float = option(
        0.2, "h2d share of the training phase above which the run is transfer-bound",
        ge=0, le=1)
    straggler_ratio: float = option(
        1.25, "a rank whose work per step is more than this many times the median of the "
              "other ranks' is a straggler (the one rule: "
              "pipeline.profile.detectors.straggler)", gt=1)
    straggler_min_fraction: float = option(
        0.1, "share of the training phase the other ranks spend waiting for a straggler above "
             "which it can be the verdict (below it, it is noted with `also`)", ge=0, le=1)
    data_busy_fraction: float = option(
        0.8, "preprocessing busy share above which it counts as saturated (advice: add capacity)",
        ge=0, le=1)
    trace_steps: int = option(
        200, "recent steps per rank kept for timeline.json (memory stays bounded)", ge=0,
        hint="use 0 to write no per-step events")
    nvtx: bool = option(True, "on CUDA, also push each span as an NVTX range for Nsight Systems")
