"""Write a run's profile outputs: ``timeline.json``, ``breakdown.png`` and ``report.md``.

One call for the driver at the end of a run and for ``pipeline report`` (which leaves the
timeline alone: it only changes when the run does).
"""

from __future__ import annotations

from pathlib import Path

from pipeline.profile.diagnosis import Diagnosis
from pipeline.profile.plot import plot_breakdown
from pipeline.profile.report import write_report
from pipeline.profile.schema import SavedProfile
from pipeline.profile.timeline import write_timeline

TIMELINE_FILE = "timeline.json"
BREAKDOWN_FILE = "breakdown.png"
REPORT_FILE = "report.md"


def write_artifacts(run_dir: str | Path, profile: SavedProfile, diagnosis: Diagnosis, *,
                    timeline: bool = True) -> dict[str, Path]:
    """Write the outputs into ``run_dir``; returns ``{file name: path}`` of what was written."""
    run_dir = Path(run_dir)
    out = {}
    if timeline:
        out[TIMELINE_FILE] = write_timeline(run_dir / TIMELINE_FILE, profile.events,
                                            profile.data_ops, profile.pool)
    out[BREAKDOWN_FILE] = plot_breakdown(run_dir / BREAKDOWN_FILE, profile.merged,
                                         profile.throughput)
    out[REPORT_FILE] = write_report(run_dir / REPORT_FILE, diagnosis, profile.merged,
                                    profile.pool)
    return out
