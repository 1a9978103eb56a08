"""NCCL/gloo settings advised from a :class:`Topology`, each with its reason. Pure.

NCCL guesses its network when nothing is set, and a wrong guess is silent: an unset or wrong GID
index on RoCE, a missing GPUDirect module or a socket interface chosen from a bridge drops
traffic to TCP and costs several times the all-reduce time. The advice names the interface and
the HCAs explicitly (``=`` makes NCCL match names exactly, not as prefixes) and never uses an
excludes-list, which breaks as soon as a node has an interface the list did not foresee.
``NCCL_IB_HCA`` lists the compute rails only (:mod:`pipeline.collective.rails`), never the
storage or in-band ports beside them; :mod:`pipeline.collective.ranks` reorders it per rank.

Variables the user set are never overridden; where they disagree with the advice, the
disagreement is reported in ``conflicts`` so ``pipeline doctor`` can show both.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from pipeline.collective.rails import Rails, pair_rails
from pipeline.collective.topology import GDR_ON, NetInterface, Topology

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Advice:
    """Environment for Train workers: only variables the user did not set."""

    env: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    conflicts: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """What was decided and needs no action (storage ports left out, where distances came from)."""
    hca_ports: list[str] = field(default_factory=list)
    """``dev:port`` entries NCCL should use (the compute rails), whether or not the user set
    ``NCCL_IB_HCA``; :mod:`pipeline.collective.ranks` orders them per rank."""


def advise(topology: Topology, user_env: Mapping[str, str]) -> Advice:
    """Advised env, reasons, warnings and conflicts with ``user_env`` for one node."""
    proposed: dict[str, tuple[str, str]] = {}
    warnings: list[str] = []
    rails = pair_rails(topology)
    notes = list(rails.notes)
    nics = _advise_rdma(topology, rails, proposed, warnings)
    socket_nic = _advise_socket(topology, proposed, warnings)
    if not rails.known:  # with distances known, the pairing's warnings say more than NUMA
        _warn_numa(topology, nics or ([socket_nic.name] if socket_nic else []), warnings)
    if topology.acs == "on":
        warnings.append(
            f"PCIe ACS redirect is on at {', '.join(topology.acs_bridges)}: GPU peer-to-peer "
            "and GPUDirect RDMA traffic detours through the root complex; disable ACS in the "
            "BIOS (or with setpci) on bare metal")
    env, reasons, conflicts = {}, {}, []
    for key, (value, reason) in proposed.items():
        if key not in user_env:
            env[key], reasons[key] = value, reason
        elif user_env[key] != value:
            conflicts.append(f"{key}={user_env[key]!r} is set by you and kept; Feedline would "
                             f"set {value!r}: {reason}")
    conflicts.extend(_user_conflicts(topology, user_env))
    hca = proposed.get("NCCL_IB_HCA", ("", ""))[0].lstrip("=")
    return Advice(env=env, reasons=reasons, warnings=warnings, conflicts=conflicts, notes=notes,
                  hca_ports=[h for h in hca.split(",") if h])


def _advise_rdma(topology: Topology, rails: Rails, proposed: dict[str, tuple[str, str]],
                 warnings: list[str]) -> list[str]:
    """Propose the NCCL_IB_* settings; returns the RDMA devices NCCL will use."""
    warnings.extend(rails.warnings)
    usable = []
    for dev, port in topology.active_rdma_ports:
        if port.kind == "RoCE" and port.roce_v2_gid_index is None:
            warnings.append(
                f"{dev.name}:{port.port} is RoCE but has no routable RoCE v2 GID (is an IP "
                f"address configured on {port.netdev or 'its netdev'}?); NCCL will not use it")
            continue
        usable.append((dev, port))
    if not usable:
        inactive = [d.name for d in topology.rdma]
        why = (f"RDMA devices {', '.join(inactive)} have no usable ACTIVE port" if inactive
               else "no RDMA device (/sys/class/infiniband is empty or absent)")
        if inactive:
            warnings.append(f"{why}; check `ibstat` and the cabling or subnet manager")
        proposed["NCCL_IB_DISABLE"] = ("1", f"{why}, so NCCL goes straight to sockets instead "
                                            "of probing for IB")
        return []
    order = {name: i for i, name in enumerate(rails.compute)}
    rails_up = sorted(((d, p) for d, p in usable if d.name in order),
                      key=lambda dp: (order[dp[0].name], dp[1].port))
    if rails_up:
        usable = rails_up
    elif rails.known:
        warnings.append(f"no compute rail ({', '.join(rails.compute) or 'none'}) has a usable "
                        "port: NCCL falls back to the storage ports, which share their links "
                        "with storage traffic")
    names = [f"{d.name}:{p.port}" for d, p in usable]
    described = ", ".join(f"{d.name}:{p.port} ({_paired(rails, d.name)}{p.kind}, "
                          f"{_rate(p.rate_gbps)})" for d, p in usable)
    what = "compute rails" if rails.known and rails_up else "active RDMA ports"
    proposed["NCCL_IB_HCA"] = ("=" + ",".join(names),
                               f"{what} {described}; '=' makes NCCL match these "
                               "names exactly instead of as prefixes"
                               + (f"; left out: {', '.join(rails.storage)}" if rails.storage
                                  else ""))
    roce = [(d, p) for d, p in usable if p.kind == "RoCE"]
    if roce:
        counts = Counter(p.roce_v2_gid_index for _, p in roce)
        index = min(counts, key=lambda i: (-counts[i], i))
        if len(counts) > 1:
            detail = ", ".join(f"{d.name}:{p.port}={p.roce_v2_gid_index}" for d, p in roce)
            warnings.append(f"RoCE v2 GID index differs between ports ({detail}) but "
                            "NCCL_IB_GID_INDEX is one value; configure the same index everywhere")
        proposed["NCCL_IB_GID_INDEX"] = (
            str(index), f"the RoCE v2 GID with a routable address is at index {index}; without "
                        "it NCCL may pick a RoCE v1 or link-local GID and fail across subnets")
    if topology.gpus and topology.gdr in GDR_ON:
        proposed["NCCL_NET_GDR_LEVEL"] = (
            "PHB", f"GPUDirect RDMA is available ({topology.gdr}); PHB lets the NIC read GPU "
                   "memory whenever both share a CPU socket, not only behind one PCIe switch")
    elif topology.gpus and topology.gdr == "off":
        warnings.append(
            "RDMA is present but GPUDirect RDMA is off: every transfer bounces through host "
            "memory; load the module (`modprobe nvidia_peermem`) or use the open NVIDIA kernel "
            "module on Linux >= 5.12 for dma-buf")
    return sorted({d.name for d, _ in usable})


def _paired(rails: Rails, device: str) -> str:
    gpus = [str(p.gpu) for p in rails.pairs if p.rail == device]
    if not gpus:
        return ""
    distance = next(p.distance for p in rails.pairs if p.rail == device)
    return f"GPU {','.join(gpus)} {distance}, "


def _advise_socket(topology: Topology, proposed: dict[str, tuple[str, str]],
                   warnings: list[str]) -> NetInterface | None:
    """Propose the bootstrap/socket interface for NCCL and gloo."""
    if topology.interfaces is None:
        warnings.append("network interfaces are unknown (/sys/class/net unreadable); NCCL and "
                        "gloo will guess the socket interface")
        return None
    up = [i for i in topology.interfaces if i.up and not i.loopback]
    # A port of a bond or team carries no address of its own: the aggregate above it does.
    physical = [i for i in up if not i.virtual and i.master is None]
    pool, kind = (physical, "") if physical else (up, "virtual (container network)")
    routed = [i for i in pool if i.has_route is not False]
    pool = routed or pool
    if not pool:
        loopback = [i for i in topology.interfaces if i.loopback]
        warnings.append("only the loopback interface is up: this node can run single-node jobs "
                        "only; bring up a NIC to train across nodes")
        if not loopback:
            return None
        chosen, why = loopback[0], "only loopback is up (single-node jobs only)"
    else:
        # The kernel sends through the default route with the lowest metric; names say nothing.
        pool.sort(key=lambda i: (not i.default_route, i.default_metric or 0,
                                 -(i.speed_mbps or 0), i.name))
        chosen = pool[0]
        facts = [kind or chosen.kind]
        if chosen.default_route:
            facts.append(f"default route (metric {chosen.default_metric})")
        if chosen.speed_mbps:
            facts.append(f"{chosen.speed_mbps} Mb/s")
        why = f"{chosen.name}: {', '.join(facts)}, up"
        others = [f"{i.name} (metric {i.default_metric})" for i in pool[1:] if i.default_route]
        if others:
            why += f"; default routes with a higher metric: {', '.join(others)}"
        skipped = sorted(i.name for i in up if i.virtual and i is not chosen and physical)
        if skipped:
            why += f"; skipped virtual {', '.join(skipped)}"
    proposed["NCCL_SOCKET_IFNAME"] = ("=" + chosen.name, why)
    proposed["GLOO_SOCKET_IFNAME"] = (chosen.name, why)
    return chosen


def _warn_numa(topology: Topology, nic_names: list[str], warnings: list[str]) -> None:
    nic_numa = {d.name: d.numa_node for d in topology.rdma}
    nic_numa.update({i.name: i.numa_node for i in topology.interfaces or ()})
    nodes = {nic_numa.get(n) for n in nic_names} - {None}
    if not nodes:
        return
    far = sorted({g.numa_node for g in topology.gpus} - {None} - nodes)
    for numa in far:
        ids = [str(g.index) for g in topology.gpus if g.numa_node == numa]
        gpus = f"GPU {ids[0]} is" if len(ids) == 1 else f"GPUs {','.join(ids)} are"
        warnings.append(
            f"{gpus} on NUMA node {numa} but the NICs ({', '.join(nic_names)}) are on "
            f"NUMA node {','.join(map(str, sorted(nodes)))}: inter-node traffic crosses the CPU "
            "interconnect; move the NIC or GPUs to the same socket where the board allows")


def _user_conflicts(topology: Topology, user_env: Mapping[str, str]) -> list[str]:
    out = []
    active = [f"{d.name}:{p.port}" for d, p in topology.active_rdma_ports]
    if user_env.get("NCCL_IB_DISABLE", "0") not in ("", "0") and active:
        out.append(f"NCCL_IB_DISABLE={user_env['NCCL_IB_DISABLE']!r} turns off the active RDMA "
                   f"ports {', '.join(active)}; unset it to let NCCL use RDMA")
    hca = user_env.get("NCCL_IB_HCA", "")
    rails = pair_rails(topology)
    if hca and rails.known and rails.storage and not hca.startswith("^"):
        listed = {h.split(":")[0] for h in hca.lstrip("=").split(",") if h}
        exact = hca.startswith("=")
        storage = [n for n in rails.storage
                   if any(n == h or (not exact and n.startswith(h)) for h in listed)]
        if storage:
            out.append(f"NCCL_IB_HCA={hca!r} includes {', '.join(storage)}, which no GPU is "
                       f"paired with (storage or in-band ports); use "
                       f"'={','.join(rails.compute)}' style names of the compute rails only")
    wanted = user_env.get("NCCL_SOCKET_IFNAME", "")
    if wanted and not wanted.startswith("^") and topology.interfaces is not None:
        exact = wanted.startswith("=")
        names = [n for n in wanted.lstrip("=").split(",") if n]
        present = [i.name for i in topology.interfaces]
        missing = [n for n in names
                   if not any(p == n or (not exact and p.startswith(n)) for p in present)]
        if missing and len(missing) == len(names):
            out.append(f"NCCL_SOCKET_IFNAME={wanted!r} matches no interface on "
                       f"{topology.hostname} (has {', '.join(present)}); NCCL will fail to start")
    return out


def _rate(rate_gbps: float | None) -> str:
    return f"{rate_gbps:g} Gb/s" if rate_gbps else "rate unknown"
