"""Rendering an ingest benchmark result: a console table (rich) and the Markdown file to commit.

Pure functions of the plain data :func:`pipeline.bench.ingest.run_ingest_bench` returns, so a
saved JSON result can be re-rendered without running anything. Both renderings hold the same
rows: one table of medians (min–max), the physical check's reasons for every INVALID row,
Feedline's ratios on the end-to-end metric, and the issue's targets.
"""

from __future__ import annotations

from typing import Any

from pipeline.bench.ingest_check import CORE_SLACK
from pipeline.bench.ingest_summary import CACHED

LABELS = {
    "feedline": "Feedline",
    "feedline_cache": "Feedline (cache)",
    "ray_data_tuned": "raw Ray Data tuned",
    "ray_data_defaults": "raw Ray Data (defaults)",
    "dataloader_tuned": "DataLoader tuned",
    "ceiling": "ceiling (decode alone, all cores)",
}
SHORT = {"ray_data_tuned": "Ray Data tuned", "ray_data_defaults": "Ray Data defaults",
         "ceiling": "ceiling"}
NOTES = [
    "End to end = samples ÷ wall clock from building the pipeline to the last batch of the "
    "last epoch (start-up, every first batch and per-epoch restarts included): the headline. "
    "Steady state leaves out each epoch's first batch; † marks a steady rate the machine "
    "cannot sustain (it drained a buffer filled before the first batch). The cache row "
    "replays decoded samples after epoch 1, so the ceiling bounds only its first epoch. "
    "CPU ms/sample (1-epoch runs): "
    "every process of the contender (driver, Ray raylet/workers/actors, DataLoader or pool "
    "workers), idle background included. Added memory: peak PSS of all those processes "
    "minus the idle baseline.",
    "Ray's own start-up (`ray.init`) is outside every run: it is paid once per job; "
    "`pipeline bench train` times whole jobs.",
]


def label(name: str) -> str:
    return LABELS.get(name, name)


def _num(value: float | None, spec: str) -> str:
    return "–" if value is None else format(value, spec)


def _cell(stats: dict[str, Any] | None, spec: str, *, markdown: bool) -> str:
    if not stats or stats["median"] is None:
        return "–"
    median, low, high = (_num(stats[k], spec) for k in ("median", "min", "max"))
    if low == high:
        return median
    return f"**{median}** ({low}–{high})" if markdown else f"{median}\n[dim]{low}–{high}[/]"


def _columns(result: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """(run kind, metric, Markdown header, console header, format) of the main table."""
    kinds = sorted({int(e) for rows in result["summary"].values() for e in rows})
    short, long = str(kinds[0]), str(kinds[-1])
    cols = [(str(e), "e2e_sps", f"end to end, {e} epoch{'s' if e > 1 else ''} (samples/s)",
             f"end to end\n{e} ep, /s", ",.0f") for e in kinds]
    cols += [(long, "steady_sps", "steady state (samples/s)", "steady\nstate /s", ",.0f"),
             (long, "ttfb_s", "first batch (s)", "first\nbatch s", ".2f")]
    if long != short:
        cols.append((long, "ttfb_later_s", f"first batch, epochs 2–{long} (s)",
                     f"first batch\nep 2–{long} s", ".3f"))
    cols += [(short, "cpu_ms_per_sample", "CPU ms/sample", "CPU ms\n/sample", ".2f"),
             (long, "added_mb", "added memory (MiB)", "added\nMiB", ",.0f")]
    return cols


def _rows(result: dict[str, Any], *, markdown: bool) -> list[list[str]]:
    cores = result["workload"]["cores"]
    invalid = "**INVALID**" if markdown else "[bold red]INVALID[/]"
    rows = []
    for name, kinds in result["summary"].items():
        valid = result["verdicts"][name]["valid"]
        cells = [label(name) if markdown else SHORT.get(name, label(name))]
        for kind, metric, _, _, spec in _columns(result):
            if metric == "e2e_sps" and not valid:
                cells.append(invalid)
                continue
            stats = kinds.get(kind, {}).get(metric)
            # the console keeps min–max for the headline only; Markdown and JSON have all
            cell = _cell(stats, spec, markdown=markdown) if markdown or metric == "e2e_sps" \
                else _num(stats["median"] if stats else None, spec)
            if metric == "steady_sps" and name not in CACHED \
                    and _unsustainable(kinds[kind], cores):
                cell += "†"
            cells.append(cell)
        cells.append("ok" if valid else invalid)
        rows.append(cells)
    return rows


def _unsustainable(kind: dict[str, Any], cores: float) -> bool:
    steady, cpu = kind["steady_sps"]["median"], kind["cpu_ms_per_sample"]["median"]
    return steady is not None and cpu is not None and steady * cpu / 1e3 > cores * CORE_SLACK


def _ratio_rows(result: dict[str, Any], *, markdown: bool = True
                ) -> tuple[list[str], list[list[str]]]:
    kinds = sorted({int(e) for rows in result["summary"].values() for e in rows})
    header = ["Feedline row", "÷ baseline"] + [f"end to end, {e} ep." for e in kinds] + \
        ["added memory"]
    rows = []
    for ours, bases in result["ratios"].items():
        for base, r in bases.items():
            if r == "INVALID":
                cells = ["INVALID"] * (len(kinds) + 1)
            else:
                cells = [f"{_num(r.get(f'e2e_{e}'), '.2f')}x" for e in kinds]
                cells.append(f"{_num(r['added_memory'], '.2f')}x")
            name = label(base) if markdown else SHORT.get(base, label(base))
            rows.append([label(ours), name, *cells])
    return header, rows


def _facts(result: dict[str, Any]) -> list[str]:
    m, w, c, idle = result["machine"], result["workload"], result["config"], result["idle"]
    versions = ", ".join(f"{k} {v}" for k, v in m["versions"].items())
    lines = [
        f"machine: {m['nproc']} cores (`nproc`), {m['cpu_model']}, {m['ram_gib']} GiB RAM; "
        f"{m['platform']}; Python {m['python']}; {versions}",
        f"Ray: {_num(m['ray_cluster_cpus'], 'g')} logical CPUs, "
        f"{'started by the benchmark' if result['ray_started_by_benchmark'] else 'joined'}",
        f"same work for every contender: {w['samples']:,} synthetic JPEGs "
        f"{c['source_size'][0]}x{c['source_size'][1]} → decode, bilinear resize → "
        f"{w['output']} (checked byte for byte in a warm-up); batch {w['batch_size']}; "
        f"{w['workers']} decode workers (1 CPU each; the ceiling uses all {w['cores']} cores); "
        f"{w['prefetch']} batches of prefetch; Ray Data blocks of {w['rows_per_block']} rows",
        f"idle baseline (measured once, subtracted from every memory figure): "
        f"{idle['pss_mb']:,.0f} MiB PSS, {idle['cores']:.2f} cores busy",
        f"{c['reps']} repetitions, contender order rotated each time; each slot runs "
        f"{' then '.join(str(e) for e in c['epochs'])} epoch(s) on fresh pipelines; "
        f"cells: median (min–max)",
        f"run on {m['date']}; load average (1, 5, 15 min) before "
        f"{_load(m['load_average_before'])}, after {_load(m['load_average'])}",
    ]
    decided = {r["contender"]: r["decided"] for r in result["runs"] if r.get("decided")}
    lines += [f"{label(n)} decided: {d.get('mode')} ({d.get('reason')})"
              for n, d in decided.items()]
    return lines


def _load(values: list[float] | None) -> str:
    return "–" if not values else ", ".join(f"{v:.1f}" for v in values)


def _invalid(result: dict[str, Any]) -> list[str]:
    return [f"{label(n)} INVALID: {reason}" for n, v in result["verdicts"].items()
            for reason in v["reasons"]]


def _targets(result: dict[str, Any]) -> list[list[str]]:
    rows = []
    for t in result["targets"]:
        value = "INVALID" if t["invalid"] else f"{_num(t['value'], '.2f')}x"
        met = {True: "yes", False: "no", None: "–"}[t["met"]]
        rows.append([label(t["contender"]), t["target"], value, met])
    return rows


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out + [""]


def to_markdown(result: dict[str, Any]) -> str:
    """The whole report as Markdown: facts, table, INVALID reasons, ratios, targets, notes."""
    lines = ["# Ingest benchmark: Feedline vs tuned raw Ray Data, DataLoader and the ceiling", ""]
    lines += [f"- {fact}" for fact in _facts(result)] + [""]
    header = ["contender", *(h for _, _, h, _, _ in _columns(result)), "physical check"]
    lines += _md_table(header, _rows(result, markdown=True))
    lines += [f"- {line}" for line in _invalid(result)] + ([""] if _invalid(result) else [])
    if result["ratios"]:
        lines += ["## Feedline ÷ baseline (medians, end to end)", ""]
        lines += _md_table(*_ratio_rows(result))
    if result["targets"]:
        lines += ["## Targets (issue 13)", ""]
        lines += _md_table(["row", "target", "measured", "met"], _targets(result))
    lines += [f"_{note}_" for note in NOTES]
    return "\n".join(lines) + "\n"


def print_console(result: dict[str, Any], console: Any) -> None:
    """The same report on a rich console."""
    from rich import box
    from rich.table import Table

    console.rule("ingest benchmark")
    for fact in _facts(result):
        console.print(f"[dim]•[/] {fact}")
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("contender", min_width=17, no_wrap=True)
    for _, _, _, head, _ in _columns(result):
        table.add_column(head, justify="right")
    table.add_column("check")
    for row in _rows(result, markdown=False):
        table.add_row(*row)
    console.print(table)
    for line in _invalid(result):
        console.print(f"[red]{line}[/]")
    if result["ratios"]:
        header, rows = _ratio_rows(result, markdown=False)
        ratios = Table(*header, title="Feedline ÷ baseline (medians, end to end)",
                       box=box.SIMPLE_HEAD)
        for row in rows:
            ratios.add_row(*row)
        console.print(ratios)
    if result["targets"]:
        targets = Table("row", "target", "measured", "met", title="targets (issue 13)",
                        box=box.SIMPLE_HEAD)
        for row in _targets(result):
            targets.add_row(*row)
        console.print(targets)
    for note in NOTES:
        console.print(f"[dim]{note}[/]")
