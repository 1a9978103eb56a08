"""``breakdown.png``: where each rank's training time went, and throughput over time.

Left: one stacked bar per rank, the seconds of its training phase split by phase — steps'
phases, start-up, validation, report, checkpoint and untracked — so the bar's height is the
rank's training wall (same colours on every run, so two plots compare at a glance). Right:
samples/s over time, one line per rank when the points carry a ``rank``, else one line for the
job.

Throughput points are ``{"time_s": seconds since start, "samples_per_s": rate}`` with optional
``"rank"`` and ``"epoch"``. Uses matplotlib's Agg canvas directly (no pyplot, so no global
backend state); matplotlib is imported when plotting, not when the package is.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pipeline.profile._summary import TRAINING_PHASES

# Fixed colour per phase: waiting phases warm, compute cool, unexplained greys.
PHASE_COLOURS = {
    "startup": "#8c564b", "data_wait": "#d62728", "h2d": "#ff7f0e", "forward": "#1f77b4",
    "backward": "#17becf", "comm_exposed": "#9467bd", "optimizer": "#2ca02c",
    "other": "#b0b0b0", "validation": "#e377c2", "report": "#bcbd22", "checkpoint": "#7f7f7f",
    "untracked": "#dcdcdc",
}


def plot_breakdown(path: str | Path, merged: Mapping[str, Any],
                   throughput: Sequence[Mapping[str, Any]]) -> Path:
    """Draw the breakdown and throughput panels into ``path`` (PNG); returns it."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(11, 4.5), dpi=100)
    FigureCanvasAgg(fig)
    bars, rate = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.3]})
    _bars(bars, merged)
    _throughput(rate, throughput)
    fig.suptitle("Where the training time went")
    fig.tight_layout()
    fig.savefig(path, format="png")
    return path


def _bars(ax: Any, merged: Mapping[str, Any]) -> None:
    per_rank = merged.get("per_rank") or {}
    ranks = sorted(per_rank, key=int)
    bottoms = [0.0] * len(ranks)
    for phase in TRAINING_PHASES:
        heights = [per_rank[r]["training"]["phases"][phase] for r in ranks]
        ax.bar([f"rank {r}" for r in ranks], heights, bottom=bottoms, label=phase,
               color=PHASE_COLOURS[phase], edgecolor="white", linewidth=0.5)
        bottoms = [b + h for b, h in zip(bottoms, heights, strict=True)]
    ax.set_ylabel("seconds of the training phase")
    ax.set_title("training phase per rank")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))


def _throughput(ax: Any, throughput: Sequence[Mapping[str, Any]]) -> None:
    ax.set_title("throughput")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("samples/s")
    if not throughput:
        ax.text(0.5, 0.5, "no throughput samples recorded", ha="center", va="center",
                transform=ax.transAxes)
        return
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for point in throughput:
        label = f"rank {point['rank']}" if "rank" in point else "job"
        series[label].append((float(point["time_s"]), float(point["samples_per_s"])))
    for label, points in sorted(series.items()):
        points.sort()
        ax.plot([t for t, _ in points], [v for _, v in points], marker=".", label=label)
    ax.set_ylim(bottom=0)
    if len(series) > 1:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
