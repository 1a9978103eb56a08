"""``pipeline doctor [--address ADDR] [--root PATH] [--nccl-log FILE] [--json]``.

What NCCL will see, per node: GPUs and how they are linked, each GPU's rail (its nearest RDMA
NIC), the compute rails given to NCCL and the storage ports left out, the socket interface, the
advised env and the plan each local rank gets on top of it. ``--nccl-log`` reads what NCCL
actually did (``NCCL_DEBUG=INFO`` output) and flags where it differs from the advice.

Without a cluster (no ``--address``, no ``RAY_ADDRESS``, Ray not initialised) it inspects this
machine and never starts Ray. With one, detection runs as one pinned task per alive node; the
advice is computed here against this shell's environment, because that is the environment the
training driver would pass on to its workers.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.collective import Advice, Topology, advise, detect_topology
from pipeline.collective._gpus import RECORDINGS
from pipeline.collective.nccl_log import check_nccl_log, parse_nccl_log
from pipeline.collective.rails import Rails, natural, pair_rails
from pipeline.collective.ranks import RankPlan, plan_ranks

_ROOT_FILES = f"""\
files read below --root (a captured tree; the live machine when it is /):
  sys/class/infiniband/*/ports/*/{{state,phys_state,rate,link_layer}}, .../gids/*,
    .../gid_attrs/{{types,ndevs}}/*          RDMA ports, RoCE v2 GID index
  sys/class/infiniband/*/device             -> the HCA's PCI device (numa_node, net/)
  sys/class/net/*/{{operstate,flags,type,speed,device,master,lower_*}}, bonding/, bridge/
                                            interfaces: physical, bond, team, VLAN, bridge, veth
  sys/bus/pci/devices/*/{{vendor,class,device,numa_node,local_cpulist,config}}
                                            GPUs by PCI scan, NUMA, local CPUs, PCIe ACS
  sys/devices/pci*/...                      the PCI tree those links point into: GPU<->NIC
                                            distance when nvidia-smi output is missing
  sys/devices/system/node/node*/cpulist     CPUs of a NUMA node
  sys/module/*, proc/modules, proc/driver/nvidia/version, proc/sys/kernel/osrelease
                                            GPUDirect RDMA (nvidia_peermem, dma-buf)
  proc/net/route, proc/net/vlan/config      routes and their metrics, VLANs
  etc/hostname
{chr(10).join(f"  commands/{k}.txt{' ' * max(1, 24 - len(k))}output of `{v}`"
              for k, v in RECORDINGS.items())}
A missing commands/ file is reported as a note. On the live machine (--root /) nothing is read
from commands/: GPUs come from NVML (nvidia-ml-py) when it is installed, else doctor runs
nvidia-smi itself; GPU<->NIC distances come from `nvidia-smi topo -m` or the PCI tree.
"""


def configure(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = _ROOT_FILES
    parser.add_argument("--address", default=None,
                        help="Ray cluster to inspect (default: RAY_ADDRESS, else this machine)")
    parser.add_argument("--root", default="/",
                        help="read /sys, /proc, /etc and recorded commands/ below this path "
                             "(a captured tree; see below)")
    parser.add_argument("--nccl-log", default=None, metavar="FILE",
                        help="NCCL_DEBUG=INFO output of a run (e.g. a worker log): which "
                             "transport each communicator used, checked against the advice")
    parser.add_argument("--json", action="store_true", help="print JSON instead of tables")


def main(args: argparse.Namespace) -> int:
    topologies = _detect(args.address, args.root)
    reports = [(t, advise(t, os.environ)) for t in topologies]
    log = _nccl_log(args.nccl_log, reports)
    if args.json:
        out = {"nodes": [_node_json(t, a) for t, a in reports]}
        if log is not None:
            out["nccl_log"] = log
        print(json.dumps(out, indent=2))
        return 0
    console = Console()
    for topology, advice in reports:
        console.print(_table(topology, advice))
    if log is not None:
        console.print(_log_table(log))
    return 0


def _nccl_log(path: str | None, reports: list[tuple[Topology, Advice]]) -> dict | None:
    """What NCCL did according to ``path``, and where it differs from the advice: a node's
    advice for its own communicators, the first node's for hosts doctor did not inspect."""
    if path is None:
        return None
    log = parse_nccl_log(Path(path).read_text(errors="replace"))
    advised = {t.hostname: {**os.environ, **a.env} for t, a in reports}
    first = next(iter(advised.values()), dict(os.environ))
    problems = check_nccl_log(log, first) if not set(advised) & {c.host for c in log.comms} \
        else [p for host, env in advised.items()
              for p in check_nccl_log(_only(log, host), env)]
    return {"file": path, "transports": list(log.transports),
            "communicators": [{"comm": c.comm, "host": c.host, "rank": c.rank,
                               "nranks": c.nranks, "transports": list(c.transports),
                               "gdr": c.gdr} for c in log.comms],
            "problems": problems}


def _only(log, host: str):
    from dataclasses import replace

    keep = {k: v for k, v in log.networks.items() if k.split(":")[0] == host}
    return replace(log, comms=tuple(c for c in log.comms if c.host == host), networks=keep,
                   ib_ports={k: v for k, v in log.ib_ports.items() if k.split(":")[0] == host},
                   socket_ifaces={k: v for k, v in log.socket_ifaces.items()
                                  if k.split(":")[0] == host})


def _detect(address: str | None, root: str) -> list[Topology]:
    from pipeline.cluster.session import ray_session
    from pipeline.collective import on_ray

    if not on_ray.ray_in_use(address):
        return [detect_topology(root)]
    with ray_session(address, dashboard=False):
        return on_ray.detect_on_nodes(root)


def _node_json(topology: Topology, advice: Advice) -> dict:
    rails = pair_rails(topology)
    return {"hostname": topology.hostname, "topology": topology.as_dict(),
            "rails": {"pairs": [p.as_dict() for p in rails.pairs], "compute": list(rails.compute),
                      "storage": list(rails.storage)},
            "nccl_env": advice.env,
            "rank_plans": [p.as_dict() for p in plan_ranks(topology, advice)],
            "warnings": advice.warnings + [f"conflict: {c}" for c in advice.conflicts],
            "notes": advice.notes + list(topology.notes)}


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
            + f" (NUMA {_n(d.numa_node)})"
            for d in sorted(topology.rdma, key=lambda d: natural(d.name)) for p in d.ports]
    table.add_row("RDMA devices", "\n".join(rdma) or "none")
    rails = pair_rails(topology)
    if rails.pairs:
        table.add_row("GPU → rail", _pairs(rails, topology))
    table.add_row("GPUDirect RDMA", topology.gdr)
    table.add_row("PCIe ACS", topology.acs + (f" ({', '.join(topology.acs_bridges)})"
                                              if topology.acs_bridges else ""))
    nics = [f"{escape(v)} [dim]({escape(advice.reasons[k])})[/]" for k, v in advice.env.items()
            if k in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA")]
    table.add_row("chosen NICs", "\n".join(nics) or "as set by you")
    env = [escape(f"{k}={v}") for k, v in advice.env.items()]
    table.add_row("advised env", "\n".join(env) or "nothing to add")
    plans = plan_ranks(topology, advice)
    if plans:
        table.add_row("per local rank", "\n".join(_plan_line(p) for p in plans))
    problems = advice.warnings + [f"conflict: {c}" for c in advice.conflicts]
    table.add_row("warnings", "\n".join(f"[yellow]{escape(w)}[/]" for w in problems) or "none")
    notes = advice.notes + list(topology.notes)
    if notes:
        table.add_row("notes", "[dim]" + escape("\n".join(notes)) + "[/]")
    return table


def _pairs(rails: Rails, topology: Topology) -> str:
    ports = {d.name: d for d in topology.rdma}
    lines = []
    for p in rails.pairs:
        if p.rail is None:
            lines.append(f"GPU{p.gpu} → [yellow]no rail of its own[/] (nearest NIC "
                         f"{p.distance or '?'})")
            continue
        port = next(iter(ports[p.rail].active_ports), None) or (
            ports[p.rail].ports[0] if ports[p.rail].ports else None)
        name = f"{p.rail}:{port.port}" if port else p.rail
        state = p.state if p.state == "ACTIVE" else f"[yellow]{p.state}[/]"
        also = f", also {', '.join(p.alternatives)}" if p.alternatives else ""
        lines.append(f"GPU{p.gpu} → {name} {p.distance} {state}{also}")
    lines.append(f"[dim]compute rails: {', '.join(rails.compute) or 'none'}; storage/in-band "
                 f"left out: {', '.join(rails.storage) or 'none'}; distances via "
                 f"{topology.nic_distance_source}[/]")
    return "\n".join(lines)


def _plan_line(plan: RankPlan) -> str:
    rail = f"own rail {plan.rail} first" if plan.rail else "no own rail"
    cpus = (f"data threads on CPUs {plan.cpus} (NUMA {_n(plan.numa_node)})" if plan.cpus
            else "CPUs unknown")
    hca = plan.env.get("NCCL_IB_HCA")
    return escape(f"rank {plan.local_rank} (GPU{plan.gpu}): {rail}; {cpus}"
                  + (f"; NCCL_IB_HCA={hca}" if hca else ""))


def _log_table(log: dict) -> Table:
    table = Table(title=f"NCCL log {log['file']}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    comms = [f"{c['comm']} on {c['host']} rank {c['rank']}/{c['nranks']}: "
             f"{', '.join(c['transports']) or 'no connections logged'}"
             + (" (GPUDirect RDMA)" if c["gdr"] else "") for c in log["communicators"]]
    table.add_row("communicators", escape("\n".join(comms)) or "none found")
    table.add_row("mismatches", "\n".join(f"[yellow]{escape(p)}[/]" for p in log["problems"])
                  or "none: NCCL did what was advised")
    return table


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)
