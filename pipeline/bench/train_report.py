"""The training-job benchmark's result as rows and as Markdown (pure: result dict in, text out).

The console table (``pipeline.cli.bench_train``) and the Markdown file show the same rows: per
contender the median wall time from spawn to exit with min-max, the samples/s the user waited
at, the final train loss and Feedline's speed ratio to it; then Feedline's own breakdown from
its ``summary.json`` and the baselines' timing marks, then the targets of issue 13.
"""

from __future__ import annotations

import statistics
from typing import Any


def _s(spread: dict[str, float] | None, unit: str = " s") -> str:
    if not spread:
        return "failed"
    return f"{spread['median']:.1f}{unit} ({spread['min']:.1f}-{spread['max']:.1f})"


def _x(spread: dict[str, float] | None) -> str:
    if not spread:
        return "-"
    return f"{spread['min']:.2f}-{spread['max']:.2f}x"


def headline_rows(result: dict[str, Any]) -> list[list[str]]:
    """Contender, wall (median, min-max), user samples/s, train loss, runs, Feedline's ratio."""
    rows = []
    for name, c in result["contenders"].items():
        ratio = result["ratios"].get(name)
        rows.append([
            c["label"], _s(c["wall_s"]),
            f"{c['user_samples_per_s']:,.1f}" if c["user_samples_per_s"] else "-",
            f"{c['train_loss']:.4f}" if c["train_loss"] is not None else "-",
            f"{c['runs'] - c['failed']}/{c['runs']}",
            "-" if name == "feedline" else
            (f"{ratio['ratio']:.2f}x (per round {_x(ratio['per_round'])})" if ratio
             else "n/a")])
    return rows


HEADLINE = ["contender", "spawn to exit, s: median (min-max)", "samples/s waited",
            "final train loss", "ok runs", "Feedline speed: their s ÷ Feedline s"]


def breakdown_rows(result: dict[str, Any]) -> list[list[str]]:
    """Median over rounds of every number each contender reported about itself."""
    values: dict[tuple[str, str], list[float]] = {}
    for run in result["runs"]:
        if not run["ok"]:
            continue
        if run["contender"] == "feedline":
            fields = {**{f"summary.{k}": v for k, v in run["feedline"]["own"].items()},
                      **run["feedline"]["breakdown"]}
        else:
            fields = {f"mark.{k}": v for k, v in run["marks"].items()}
        for key, value in fields.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values.setdefault((run["contender"], key), []).append(float(value))
    return [[result["contenders"][name]["label"], key, f"{statistics.median(v):.2f}"]
            for (name, key), v in values.items()]


BREAKDOWN = ["contender", "reported by the contender (breakdown.*: s per phase; mark.*: s since "
                          "spawn)", "median"]


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def to_markdown(result: dict[str, Any]) -> str:
    job, cfg, m = result["job"], result["config"], result["machine"]
    lines = [
        f"# Training job, end to end: {job['epochs']} epochs",
        "",
        f"{cfg['samples']:,} JPEGs {cfg['source_size'][0]}x{cfg['source_size'][1]} → "
        f"{job['image_size'][0]}x{job['image_size'][1]} RGB, cnn, batch {job['batch_size']} per "
        f"worker, {job['workers']} training processes, {job['cpus']} CPUs for every contender; "
        f"no validation; a checkpoint every epoch. {cfg['rounds']} rounds, contender order "
        f"rotated each round; whole processes timed from spawn to exit.",
        "",
        *_table(HEADLINE, headline_rows(result)),
        "",
    ]
    if result["targets"]:
        lines += ["## Targets (issue 13)", ""]
        lines += [f"- {t['target']}: {t['value']:.2f}x, {'met' if t['met'] else 'MISSED'}"
                  for t in result["targets"]]
        lines.append("")
    rows = breakdown_rows(result)
    if rows:
        lines += ["## What each contender reported about itself", "", *_table(BREAKDOWN, rows),
                  ""]
    failed = [r for r in result["runs"] if not r["ok"]]
    if failed:
        lines += ["## Failed runs", ""]
        lines += [f"- round {r['round'] + 1} {r['contender']}: exit {r['rc']}, log {r['log']}"
                  for r in failed]
        lines.append("")
    lines += ["## Commands", ""]
    lines += [f"- {name}: `{' '.join(argv)}`" for name, argv in result["commands"].items()]
    lines += ["", "## Machine", "",
              f"nproc {m['nproc']}, {m['cpu']}; python {m['python']}, ray {m['ray']}, "
              f"torch {m['torch']}; load average before {m['loadavg'][0]:.2f}, after "
              f"{result['loadavg_after'][0]:.2f} (1 min).", ""]
    return "\n".join(lines)
