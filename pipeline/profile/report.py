"""``report.md``: the verdict, where the training time went, the evidence and the advice.

Runs on the driver and in ``pipeline report``; pure apart from writing the file. The first table
splits the training phase (every second from the first epoch's start-up to the last checkpoint)
into phases whose seconds add up to the wall; the step tables after it are the steady state.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pipeline.profile._summary import PHASES, TRAINING_PHASES
from pipeline.profile.diagnosis import Diagnosis

# What each phase of the training table is, for the reader.
_MEANING = {
    "startup": "epoch start-up: waiting for the first batch",
    "data_wait": "waiting for the next batch",
    "h2d": "host→device copies not hidden",
    "forward": "model forward (and augmentation)",
    "backward": "backward, not counting exposed all-reduce",
    "comm_exposed": "all-reduce not hidden behind backward",
    "optimizer": "optimizer step",
    "other": "inside steps, outside the named spans",
    "validation": "validation pass",
    "report": "all-reduce of metrics, straggler check, push to the driver",
    "checkpoint": "checkpoint saves",
    "untracked": "outside steps and outside every named phase",
}
# Columns of the per-epoch table: the step phases together, the rest one by one.
_EPOCH_COLUMNS = ("startup", "steps", "validation", "report", "checkpoint", "unexplained")


def render_report(diagnosis: Diagnosis, merged: Mapping[str, Any],
                  pool: Mapping[str, Any] | None = None) -> str:
    """The Markdown text of the report."""
    ev = diagnosis.evidence
    lines = [f"# Profile: {diagnosis.verdict}", "", "## Advice", ""]
    lines += [f"- {a}" for a in diagnosis.advice] or ["- (none)"]
    if diagnosis.changes:
        lines += ["", "Config changes (`pipeline run CFG --set key=value`, or `pipeline tune`):",
                  ""]
        lines += [f"- `{c['key']}={_value(c['value'])}`: {c['why']}" for c in diagnosis.changes]
    lines += _training_lines(merged)
    lines += ["", "## Evidence", "",
              f"- ranks: {ev.get('ranks', len(merged.get('per_rank', {})))}, "
              f"steps: {merged.get('steps', 0)}, samples/s in steps: "
              f"{merged.get('samples_per_s', 0):.1f}",
              f"- step time: p50 {_ms(merged['step_s']['p50'])}, "
              f"p99 {_ms(merged['step_s']['p99'])}"]
    busy = ev.get("data_busy_fraction")
    if busy is not None:
        lines.append(f"- preprocessing: busiest operator `{ev.get('data_busiest_operator')}` "
                     f"busy {busy:.0%} of its slots")
    skip = {"fractions", "ranks", "steps", "samples_per_s", "step_p50_s", "step_p99_s",
            "data_busy_fraction", "data_busiest_operator", "time_shares", "costs",
            "training_wall_s"}
    for key, value in ev.items():
        if key not in skip:
            lines.append(f"- {key}: {_fmt(value)}")
    lines += ["", "## Step breakdown (mean per step, steady state)", "",
              "| phase | ms/step | share | p50 ms | p99 ms |", "|---|---:|---:|---:|---:|"]
    for phase in PHASES:
        p = merged["phases"][phase]
        lines.append(f"| {phase} | {p['per_step_s'] * 1e3:.2f} | {p['fraction']:.1%} | "
                     f"{p['p50'] * 1e3:.2f} | {p['p99'] * 1e3:.2f} |")
    lines += ["", "## Per rank (share of the rank's training wall)", "",
              "| rank | steps | ms/step | work ms/step | wall s | "
              + " | ".join(TRAINING_PHASES) + " |",
              "|---|---:|---:|---:|---:|" + "---:|" * len(TRAINING_PHASES)]
    for rank, row in sorted(merged["per_rank"].items(), key=lambda kv: int(kv[0])):
        training = row["training"]
        shares = " | ".join(f"{training['shares'][p]:.0%}" for p in TRAINING_PHASES)
        lines.append(f"| {rank} | {row['steps']} | {row['step_s']['mean'] * 1e3:.2f} | "
                     f"{row['work_s'] * 1e3:.2f} | {training['wall_s']:.2f} | {shares} |")
    lines += _pool_lines(pool)
    lines += ["", "Files: `timeline.json` (open in https://ui.perfetto.dev), `breakdown.png`.",
              "Regenerate with `pipeline report RUN_DIR`.", ""]
    return "\n".join(lines)


def _training_lines(merged: Mapping[str, Any]) -> list[str]:
    training = merged["training"]
    phases = training["phases"]
    wall = training["mean_wall_s"]
    total = sum(phases[p]["seconds"] for p in TRAINING_PHASES)
    head = (f"Training phase: {wall:.2f} s per rank (mean over ranks; from the first epoch's "
            f"start-up to the last checkpoint). The phases below add up to {total:.2f} s "
            f"({total / wall:.1%} of it); named phases explain {training['explained']:.1%}, "
            f"`other` + `untracked` are the rest." if wall > 0
            else "Training phase: no time recorded.")
    lines = ["", "## Where the training time went", "", head, "",
             "| phase | seconds | share of wall | what |", "|---|---:|---:|---|"]
    for p in TRAINING_PHASES:
        lines.append(f"| {p} | {phases[p]['seconds']:.2f} | {phases[p]['share']:.1%} | "
                     f"{_MEANING[p]} |")
    lines.append(f"| **total** | **{total:.2f}** | "
                 f"**{sum(phases[p]['share'] for p in TRAINING_PHASES):.1%}** | |")
    costs = training["costs"]
    lines += ["", "Costs the verdict weighs (share of the training phase; a rank waiting in the "
              "all-reduce for a peer's input or start-up is charged to that cause): "
              + ", ".join(f"{c} {v:.1%}" for c, v in costs.items()) + "."]
    epochs = training.get("epochs") or {}
    if epochs:
        lines += ["", "Per epoch (share of the epoch's wall; an epoch's window ends when its "
                  "summary is sent, during `report`, so its checkpoint counts in the next):", "",
                  "| epoch | wall s | " + " | ".join(_EPOCH_COLUMNS) + " |",
                  "|---|---:|" + "---:|" * len(_EPOCH_COLUMNS)]
        for label, row in epochs.items():
            s = row["shares"]
            cols = {"startup": s["startup"], "validation": s["validation"],
                    "report": s["report"], "checkpoint": s["checkpoint"],
                    "steps": sum(s[p] for p in PHASES if p != "other"),
                    "unexplained": s["other"] + s["untracked"]}
            lines.append(f"| {label} | {row['wall_s']:.2f} | "
                         + " | ".join(f"{cols[c]:.0%}" for c in _EPOCH_COLUMNS) + " |")
    return lines


def _pool_lines(pool: Mapping[str, Any] | None) -> list[str]:
    """The decode pool controller's decisions (``data.autoscale``)."""
    if not pool or not pool.get("enabled"):
        return []
    low, high = pool["range"]
    lines = ["", "## Decode pool (data.autoscale)", "",
             f"Sized within data.concurrency [{low}, {high}] by the trainers' data wait: "
             f"ended at {pool['final_size']} actors, at most {pool['max_size']}. A smaller "
             f"pool takes effect with the next streamed epoch (Ray Data removes only idle "
             f"actors); a larger one within seconds.", ""]
    share = pool.get("decode_cpu_share")
    if share is not None:
        lines += [f"The decode actors used {share:.0%} of a CPU while decoding: "
                  + ("they computed, so more CPUs (nodes, or a cache that spares the decodes) "
                     "feed the trainers faster." if share >= 0.5 else
                     "they mostly waited (I/O, sleeps), so more actors per CPU "
                     "(`data.cpus_per_actor` below 1) feed the trainers faster."), ""]
    epochs = pool.get("epochs") or []
    if epochs:
        lines += ["| epoch | actors at its end | trainers waited | decode actor-s | "
                  "training s |", "|---:|---:|---:|---:|---:|"]
        lines += [f"| {e['epoch']} | {e['size']} | {e['wait']:.1%} | {e['work_s']:.1f} | "
                  f"{e['train_s']:.1f} |" for e in epochs]
        lines += [""]
    decisions = pool.get("decisions") or []
    if not decisions:
        return lines + ["No change: the pool it started with kept the trainers fed (or "
                        "nothing decoded long enough to judge)."]
    lines += ["| at s | action | actors | wait before | busy before | reason |",
              "|---:|---|---|---:|---:|---|"]
    lines += [f"| {d['elapsed_s']:.0f} | {d['action']} | {d['size_before']} → "
              f"{d['size_after']} | {d['wait_before']:.0%} | {d['busy_before']:.0%} | "
              f"{d['reason']} |" for d in decisions]
    return lines


def write_report(path: str | Path, diagnosis: Diagnosis, merged: Mapping[str, Any],
                 pool: Mapping[str, Any] | None = None) -> Path:
    """Write :func:`render_report` to ``path`` (e.g. ``RUN_DIR/report.md``); returns it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_report(diagnosis, merged, pool))
    return path


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"


def _value(value: Any) -> str:
    """A change's value as ``--set`` takes it (YAML/JSON): [1, 4], true, fp16."""
    return json.dumps(value, separators=(", ", ": ")) if not isinstance(value, str) else value


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, Mapping):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(_fmt(v) for v in value)
    return str(value)
