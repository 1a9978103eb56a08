"""``report.md``: the verdict, the evidence numbers and the advice, for a person to read.

Runs on the driver and in ``pipeline report``; pure apart from writing the file.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.profile._summary import PHASES
from pipeline.profile.diagnosis import Diagnosis


def render_report(diagnosis: Diagnosis, merged: Mapping[str, Any]) -> str:
    """The Markdown text of the report."""
    ev = diagnosis.evidence
    lines = [f"# Profile: {diagnosis.verdict}", "", "## Advice", ""]
    lines += [f"- {a}" for a in diagnosis.advice] or ["- (none)"]
    lines += ["", "## Evidence", "",
              f"- ranks: {ev.get('ranks', len(merged.get('per_rank', {})))}, "
              f"steps: {merged.get('steps', 0)}, samples/s: {merged.get('samples_per_s', 0):.1f}",
              f"- step time: p50 {_ms(merged['step_s']['p50'])}, "
              f"p99 {_ms(merged['step_s']['p99'])}"]
    busy = ev.get("data_busy_fraction")
    if busy is not None:
        lines.append(f"- preprocessing: busiest operator `{ev.get('data_busiest_operator')}` "
                     f"busy {busy:.0%} of its slots")
    skip = {"fractions", "ranks", "steps", "samples_per_s", "step_p50_s", "step_p99_s",
            "data_busy_fraction", "data_busiest_operator"}
    for key, value in ev.items():
        if key not in skip:
            lines.append(f"- {key}: {_fmt(value)}")
    lines += ["", "## Step breakdown (mean per step)", "",
              "| phase | ms/step | share | p50 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
    for phase in PHASES:
        p = merged["phases"][phase]
        lines.append(f"| {phase} | {p['per_step_s'] * 1e3:.2f} | {p['fraction']:.1%} | "
                     f"{p['p50'] * 1e3:.2f} | {p['p99'] * 1e3:.2f} |")
    lines += ["", "## Per rank", "",
              "| rank | steps | ms/step | work ms/step | " + " | ".join(PHASES) + " |",
              "|---|---:|---:|---:|" + "---:|" * len(PHASES)]
    for rank, row in sorted(merged["per_rank"].items(), key=lambda kv: int(kv[0])):
        shares = " | ".join(f"{row['fractions'][p]:.0%}" for p in PHASES)
        lines.append(f"| {rank} | {row['steps']} | {row['step_s']['mean'] * 1e3:.2f} | "
                     f"{row['work_s'] * 1e3:.2f} | {shares} |")
    lines += ["", "Files: `timeline.json` (open in https://ui.perfetto.dev), `breakdown.png`.",
              "Regenerate with `pipeline report RUN_DIR`.", ""]
    return "\n".join(lines)


def write_report(path: str | Path, diagnosis: Diagnosis, merged: Mapping[str, Any]) -> Path:
    """Write :func:`render_report` to ``path`` (e.g. ``RUN_DIR/report.md``); returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(diagnosis, merged))
    return path


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)
