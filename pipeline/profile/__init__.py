"""Profile stage: per-step spans on every rank, a timeline, and a verdict with advice.

Where things run:

- Train worker: :class:`StepProfiler` (per-step spans, out-of-step phases — start-up,
  validation, report, checkpoint — NVTX, CUDA events) and :func:`timed_hook` /
  :class:`CommTimer` (exposed all-reduce from DDP comm-hook futures). No Ray.
- Driver / ``pipeline report``: :func:`merge_ranks`, :func:`diagnose`, :func:`scaling_report`
  (pure), and the writers of ``timeline.json``, ``breakdown.png``, ``report.md`` and
  ``profile.json`` (schema in :mod:`pipeline.profile.schema`).
- :mod:`pipeline.profile.ray_data_stats` turns Ray Data's per-operator stats into plain dicts.

Importing this package loads neither torch, matplotlib nor Ray.
"""

from pipeline.profile._summary import PHASES, TRAINING_PHASES, combine_summaries
from pipeline.profile.artifacts import write_artifacts
from pipeline.profile.comm import CommTimer, timed_hook
from pipeline.profile.config import ProfileConfig
from pipeline.profile.diagnosis import VERDICTS, Diagnosis, context_from_config, diagnose
from pipeline.profile.merge import merge_ranks
from pipeline.profile.plot import plot_breakdown
from pipeline.profile.ray_data_stats import operator_stats
from pipeline.profile.report import write_report
from pipeline.profile.scaling import scaling_report
from pipeline.profile.schema import SavedProfile, load_profile, save_profile, summary_fields
from pipeline.profile.spans import StepProfiler
from pipeline.profile.timeline import write_timeline

__all__ = [
    "PHASES",
    "TRAINING_PHASES",
    "VERDICTS",
    "CommTimer",
    "Diagnosis",
    "ProfileConfig",
    "SavedProfile",
    "StepProfiler",
    "combine_summaries",
    "context_from_config",
    "diagnose",
    "load_profile",
    "merge_ranks",
    "operator_stats",
    "plot_breakdown",
    "save_profile",
    "scaling_report",
    "summary_fields",
    "timed_hook",
    "write_artifacts",
    "write_report",
    "write_timeline",
]
