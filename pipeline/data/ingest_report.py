"""Rendering an ingest benchmark result as Markdown: the file a reviewer reads and commits.

Pure function of the plain data :func:`pipeline.data.ingest_bench.run_ingest_bench` returns, so
a saved JSON result can be re-rendered without running anything.
"""

from __future__ import annotations

from typing import Any

LABELS = {"feedline": "Feedline", "raw_ray_data": "raw Ray Data", "dataloader": "DataLoader",
          "ceiling": "ceiling"}
COLUMNS = (  # metric, header, format
    ("steady_sps", "samples/s", ",.0f"),
    ("ttfb_s", "first batch (s)", ".2f"),
    ("stall_fraction", "stall", ".1%"),
    ("wait_p50_ms", "wait p50 (ms)", ".1f"),
    ("wait_p99_ms", "wait p99 (ms)", ".1f"),
    ("cpu_ms_per_sample", "CPU ms/sample", ".2f"),
    ("peak_extra_mb", "peak mem +MiB", ",.0f"),
    ("peak_pss_mb", "peak mem MiB", ",.0f"),
    ("store_peak_mb", "obj store MiB", ",.0f"),
    ("spilled_mb", "spilled MiB", ",.0f"),
)


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _cell(stats: dict[str, float | None], spec: str) -> str:
    median, low, high = stats["median"], stats["min"], stats["max"]
    if median is None:
        return "–"
    if low == high:
        return _num(median, spec)
    return f"**{_num(median, spec)}** ({_num(low, spec)}–{_num(high, spec)})"


def _machine(result: dict[str, Any]) -> list[str]:
    m, c = result["machine"], result["config"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    return [
        f"- machine: {m['nproc']} CPUs (`nproc`), {m['cpu_model']}, {m['ram_gib']} GiB RAM; "
        f"{m['platform']}; Python {m['python']}; {versions}",
        f"- Ray: {m['ray_cluster_cpus']} logical CPUs, "
        f"{'started by the benchmark' if result['ray_started_by_benchmark'] else 'joined'}",
        f"- workload: {c['samples']:,} synthetic {c['fmt'].upper()} images "
        f"{c['source_size'][0]}x{c['source_size'][1]} → decode, resize to "
        f"{c['image_size'][0]}x{c['image_size'][1]}, normalise (float32, 3 channels); "
        f"batch {c['batch_size']}; {c['workers']} decode workers per contender",
        f"- {c['reps']} repetitions, contenders interleaved; cells are **median** (min–max); "
        f"compute-bound step = {c['compute_factor']}x the ceiling's median data-bound time per "
        f"batch so far (median {result['compute_step_s'] * 1e3:.1f} ms)",
        f"- run on {m['date']}; load average (1, 5, 15 min) before "
        f"{_load(m.get('load_average_before'))}, after {_load(m.get('load_average'))}",
    ]


def _load(values: list[float] | None) -> str:
    return "–" if not values else ", ".join(f"{v:.1f}" for v in values)


def to_markdown(result: dict[str, Any]) -> str:
    """The whole report: machine, one table per regime, Feedline's ratios, the targets."""
    lines = ["# Ingest benchmark: Feedline vs raw Ray Data vs DataLoader vs ceiling", ""]
    lines += _machine(result) + [""]
    for regime, rows in result["summary"].items():
        lines += [f"## {regime.replace('_', '-')}", ""]
        lines.append("| contender | " + " | ".join(h for _, h, _ in COLUMNS) + " |")
        lines.append("|---|" + "---:|" * len(COLUMNS))
        for name, stats in rows.items():
            cells = [_cell(stats[m], spec) for m, _, spec in COLUMNS]
            lines.append(f"| {LABELS.get(name, name)} | " + " | ".join(cells) + " |")
        lines.append("")
    if result["ratios"]:
        lines += ["## Feedline / baseline (ratio of medians)", "",
                  "| regime | baseline | throughput | peak memory |", "|---|---|---:|---:|"]
        for regime, bases in result["ratios"].items():
            for base, r in bases.items():
                lines.append(f"| {regime.replace('_', '-')} | {LABELS.get(base, base)} | "
                             f"{_num(r['throughput'], '.2f')}x | "
                             f"{_num(r['peak_memory'], '.2f')}x |")
        lines.append("")
    if result["targets"]:
        lines += ["## Targets (issue 6)", "", "| target | measured | met |", "|---|---:|---|"]
        for t in result["targets"]:
            spec = ".1%" if "stall" in t["target"] else ".2f"
            met = {True: "yes", False: "**no**", None: "–"}[t["met"]]
            lines.append(f"| {t['target']} | {_num(t['value'], spec)} | {met} |")
        lines.append("")
    lines += ["Metrics: samples/s excludes the first batch; stall = time blocked in `next()` ÷ "
              "wall after the first batch; memory is the PSS of the benchmark process and all "
              "its descendants (Ray's processes included when the benchmark started Ray), "
              "peak and peak above the level before the pass (+MiB); object store from the "
              "raylet's store stats.", ""]
    return "\n".join(lines)
