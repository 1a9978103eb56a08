"""``pipeline bench collective``: collective bandwidth across N Ray actors, beside raw torch.

Sizes sweep from 1 KiB to ``--max-size`` by 4x. Each row shows Feedline's measurement (the
slowest rank, nccl-tests' bus bandwidth) and, for all-reduce, a plain ``dist.all_reduce`` loop
measured in the same run, with their ratio: the harness is trustworthy when it is near 1. At the
end a short probe says whether the link is far below what its class should give.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--workers", type=int, default=2, help="ranks (Ray actors), >= 2")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="auto: nccl when every worker gets a GPU, else gloo")
    parser.add_argument("--max-size", type=int, default=256 << 20, metavar="BYTES",
                        help="largest buffer (default 256 MiB)")
    parser.add_argument("--json", type=Path, default=None, metavar="FILE",
                        help="also write the rows as JSON")
    parser.add_argument("--address", default=None,
                        help="Ray cluster (default: RAY_ADDRESS, else a local Ray)")


def main(args: argparse.Namespace) -> int:
    from pipeline.cluster.session import ray_session
    from pipeline.collective import CollectiveConfig, classify_link, on_ray
    from pipeline.collective.measure import size_sweep  # torch: only for this command

    console = Console()
    sizes = size_sweep(args.max_size)
    config = CollectiveConfig(backend=args.backend)
    num_cpus = max(os.cpu_count() or 1, args.workers + 1)
    with ray_session(args.address, num_cpus, dashboard=False):
        run = on_ray.run_bench(args.workers, config, sizes)
    peak = max((r for r in run.rows if r["op"] == "all_reduce"), key=lambda r: r["size_bytes"])
    link = classify_link(peak["busbw_GBps"], run.backend, run.topology,
                         multi_node=run.nodes > 1)
    ratios = [r["busbw_GBps"] / r["raw_busbw_GBps"] for r in run.rows if r["raw_busbw_GBps"]]
    console.print(_table(run))
    console.print(
        f"all-reduce {_size(peak['size_bytes'])}: Feedline busbw {peak['busbw_GBps']:.3f} GB/s, "
        f"raw torch.distributed {peak['raw_busbw_GBps']:.3f} GB/s "
        f"(ratio {peak['busbw_GBps'] / peak['raw_busbw_GBps']:.2f}; median over sizes "
        f"{statistics.median(ratios):.2f})")
    console.print(f"backend {run.backend} ({run.backend_reason}); {run.workers} ranks on "
                  f"{run.nodes} node(s)")
    if link:
        console.print(f"[yellow]link: {link}[/]")
    if not all(r["correct"] for r in run.rows):
        console.print("[red]some collectives returned wrong results (see 'ok' column)[/]")
    if args.json:
        args.json.write_text(json.dumps(
            {"backend": run.backend, "backend_reason": run.backend_reason,
             "workers": run.workers, "nodes": run.nodes, "rows": run.rows,
             "link_warning": link}, indent=2))
    return 0 if all(r["correct"] for r in run.rows) else 1


def _table(run) -> Table:
    table = Table(title=f"collectives over {run.workers} {run.backend} ranks (GB/s)")
    for name in ("op", "size", "time", "algbw", "busbw", "raw busbw", "ratio", "ok"):
        table.add_column(name, justify="left" if name == "op" else "right")
    for r in run.rows:
        raw = r["raw_busbw_GBps"]
        table.add_row(r["op"], _size(r["size_bytes"]), f"{r['time_s'] * 1e6:.0f} us",
                      f"{r['algbw_GBps']:.3f}", f"{r['busbw_GBps']:.3f}",
                      f"{raw:.3f}" if raw else "", f"{r['busbw_GBps'] / raw:.2f}" if raw else "",
                      "yes" if r["correct"] else "[red]NO[/]")
    return table


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):g} {unit}"
    return f"{n} B"
