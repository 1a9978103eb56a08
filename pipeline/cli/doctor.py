"""``pipeline doctor [--address ADDR] [--root PATH] [--json]``: what NCCL will see, per node.

Without a cluster (no ``--address``, no ``RAY_ADDRESS``, Ray not initialised) it inspects this
machine and never starts Ray. With one, detection runs as one pinned task per alive node; the
advice is computed here against this shell's environment, because that is the environment the
training driver would pass on to its workers.
"""

from __future__ import annotations

import argparse
import json
import os

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.collective import Advice, Topology, advise, detect_topology


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", default=None,
                        help="Ray cluster to inspect (default: RAY_ADDRESS, else this machine)")
    parser.add_argument("--root", default="/",
                        help="read /sys and /proc below this path (a captured tree)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def main(args: argparse.Namespace) -> int:
    topologies = _detect(args.address, args.root)
    reports = [(t, advise(t, os.environ)) for t in topologies]
    if args.json:
        print(json.dumps({"nodes": [_node_json(t, a) for t, a in reports]}, indent=2))
        return 0
    console = Console()
    for topology, advice in reports:
        console.print(_table(topology, advice))
    return 0


def _detect(address: str | None, root: str) -> list[Topology]:
    from pipeline.collective import cluster
    from pipeline.train.session import ray_session

    if not cluster.ray_in_use(address):
        return [detect_topology(root)]
    with ray_session(address, dashboard=False):
        return cluster.detect_on_nodes(root)


def _node_json(topology: Topology, advice: Advice) -> dict:
    return {"hostname": topology.hostname, "topology": topology.as_dict(),
            "nccl_env": advice.env,
            "warnings": advice.warnings + [f"conflict: {c}" for c in advice.conflicts]}


def _table(topology: Topology, advice: Advice) -> Table:
    table = Table(title=f"{topology.hostname}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    gpus = ", ".join(f"{g.index}: {g.name} (NUMA {_n(g.numa_node)})" for g in topology.gpus)
    table.add_row("GPUs", f"{gpus or 'none'}  [dim]via {topology.gpu_source}[/]")
    table.add_row("interconnect", f"GPU↔GPU {topology.interconnect}; "
                                  f"node↔node {topology.network}")
    rdma = [f"{d.name}:{p.port} {p.kind} {p.state} {p.rate_gbps or '?'} Gb/s"
            + (f" GID {p.roce_v2_gid_index}" if p.kind == "RoCE" else "")
            + f" (NUMA {_n(d.numa_node)})" for d in topology.rdma for p in d.ports]
    table.add_row("RDMA devices", "\n".join(rdma) or "none")
    table.add_row("GPUDirect RDMA", topology.gdr)
    table.add_row("PCIe ACS", topology.acs + (f" ({', '.join(topology.acs_bridges)})"
                                              if topology.acs_bridges else ""))
    nics = [f"{escape(v)} [dim]({escape(advice.reasons[k])})[/]" for k, v in advice.env.items()
            if k in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")]
    table.add_row("chosen NICs", "\n".join(nics) or "as set by you")
    env = [escape(f"{k}={v}") for k, v in advice.env.items()]
    table.add_row("advised env", "\n".join(env) or "nothing to add")
    problems = advice.warnings + [f"conflict: {c}" for c in advice.conflicts]
    table.add_row("warnings", "\n".join(f"[yellow]{escape(w)}[/]" for w in problems) or "none")
    if topology.notes:
        table.add_row("notes", "[dim]" + escape("\n".join(topology.notes)) + "[/]")
    return table


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)
