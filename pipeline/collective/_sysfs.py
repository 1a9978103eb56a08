"""Readers for the Linux files topology detection uses (``/sys``, ``/proc``), below a root.

Each reader returns plain dicts/strings so :mod:`pipeline.collective.topology` owns the value
objects. A missing or unreadable file means "unknown" (``None``); sysfs answers EINVAL for some
attributes of down or virtual devices (``speed`` of a down NIC, unused GID types), so every
``OSError`` is treated the same way as absence.
"""

from __future__ import annotations

import logging
import os
import struct
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

_IFF_UP = 0x1
_ARPHRD_LOOPBACK = "772"
_PCI_CLASS_BRIDGE = "0x0604"
_PCI_EXT_CAP_ACS = 0x000D
_ACS_REDIRECT = 0x0004 | 0x0008  # P2P Request Redirect | P2P Completion Redirect


def read_text(path: Path) -> str | None:
    """Stripped contents of ``path``, or None when it is missing or unreadable."""
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


def numa_of(path: Path) -> int | None:
    """NUMA node from a ``numa_node`` file; the kernel writes -1 when it does not know."""
    value = read_int(path)
    return value if value is not None and value >= 0 else None


def _children(path: Path) -> list[Path]:
    try:
        return sorted(path.iterdir())
    except OSError:
        return []


# ----------------------------------------------------------------------------- RDMA


def read_rdma(root: Path) -> list[dict[str, Any]]:
    """RDMA devices from ``sys/class/infiniband``; an absent directory means no RDMA driver."""
    devices = []
    for dev in _children(root / "sys/class/infiniband"):
        ports_dir = dev / "ports"
        ports = [_read_port(dev, p) for p in _children(ports_dir) if p.name.isdigit()]
        ports.sort(key=lambda p: p["port"])
        target = _link_name(dev / "device")
        devices.append({"name": dev.name, "numa_node": numa_of(dev / "device/numa_node"),
                        "pci_bus_id": target, "ports": ports})
    return devices


def _read_port(dev: Path, port: Path) -> dict[str, Any]:
    # state reads "4: ACTIVE"; rate reads "200 Gb/sec (4X HDR)".
    state_text = read_text(port / "state") or "unknown"
    state = state_text.split(":", 1)[-1].strip() or "unknown"
    rate_text = read_text(port / "rate") or ""
    try:
        rate = float(rate_text.split()[0]) if rate_text else None
    except ValueError:
        rate = None
    netdevs = [p.name for p in _children(dev / "device/net")]
    gid_index, gid_netdev = _roce_v2_gid(port)
    return {
        "port": int(port.name),
        "state": state,
        # phys_state reads "5: LinkUp", "3: Disabled", "2: Polling" (no cable or no switch).
        "phys_state": (read_text(port / "phys_state") or "unknown").split(":", 1)[-1].strip(),
        "rate_gbps": rate,
        "link_layer": read_text(port / "link_layer") or "unknown",
        "roce_v2_gid_index": gid_index,
        "netdev": gid_netdev or (netdevs[0] if netdevs else None),
    }


def _roce_v2_gid(port: Path) -> tuple[int | None, str | None]:
    """The RoCE v2 GID NCCL should use: an IPv4-mapped one first, then any routable one.

    A link-local (fe80::) RoCE v2 GID does not cross subnets, and RoCE v1 does not route at
    all, which is why picking "the first RoCE v2 entry" is not enough.
    """
    candidates = []
    for entry in _children(port / "gid_attrs/types"):
        if not entry.name.isdigit():
            continue
        kind = (read_text(entry) or "").lower()
        if "v2" not in kind:
            continue
        index = int(entry.name)
        gid = (read_text(port / "gids" / entry.name) or "").lower()
        if not gid or set(gid) <= {"0", ":"}:
            continue  # unused table slot
        ipv4 = gid.startswith("0000:0000:0000:0000:0000:ffff:")
        link_local = gid.startswith("fe80:")
        rank = 0 if ipv4 else (2 if link_local else 1)
        candidates.append((rank, index, read_text(port / "gid_attrs/ndevs" / entry.name)))
    if not candidates:
        return None, None
    _, index, netdev = min(candidates)
    return index, netdev


def read_gdr(root: Path) -> str:
    """GPUDirect RDMA: a peer-memory module, dma-buf (open kernel module, Linux >= 5.12), or off."""
    modules = root / "sys/module"
    proc_modules = read_text(root / "proc/modules")
    loaded = {p.name for p in _children(modules)}
    if proc_modules:
        loaded |= {line.split()[0] for line in proc_modules.splitlines() if line.strip()}
    if not loaded:
        return "unknown"
    for name in ("nvidia_peermem", "nv_peer_mem"):
        if name in loaded:
            return name
    version = read_text(root / "proc/driver/nvidia/version") or ""
    if "nvidia" in loaded and "Open Kernel Module" in version and _kernel_at_least(root, (5, 12)):
        return "dmabuf"
    return "off"


def _kernel_at_least(root: Path, wanted: tuple[int, int]) -> bool:
    release = read_text(root / "proc/sys/kernel/osrelease") or ""
    parts = release.split("-")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= wanted
    except (IndexError, ValueError):
        return False


# ----------------------------------------------------------------------------- network


def read_interfaces(root: Path) -> list[dict[str, Any]] | None:
    """Interfaces from ``sys/class/net`` with routes from ``proc/net/route``; None if unreadable."""
    base = root / "sys/class/net"
    if not base.is_dir():
        return None
    routes = _read_routes(root)
    vlans = _read_vlans(root)
    out = []
    for ifc in _children(base):
        operstate = read_text(ifc / "operstate") or "unknown"
        flags = read_int(ifc / "flags") or 0
        loopback = read_text(ifc / "type") == _ARPHRD_LOOPBACK or ifc.name == "lo"
        # loopback and some tunnels report operstate "unknown" while up: trust IFF_UP then.
        up = operstate == "up" or (operstate == "unknown" and bool(flags & _IFF_UP))
        speed = read_int(ifc / "speed")
        kind = "loopback" if loopback else _kind(base, ifc, vlans)
        metric = routes.get(ifc.name) if routes else None
        out.append({
            "name": ifc.name,
            "up": up,
            "speed_mbps": speed if speed and speed > 0 else None,
            "kind": kind,
            # Bridges, veths, docker0, ifb and lo carry no traffic of their own between nodes;
            # a bond, team or VLAN does, through the physical ports below it.
            "virtual": kind not in ("physical", "bond", "team", "vlan"),
            "loopback": loopback,
            "numa_node": numa_of(ifc / "device/numa_node"),
            "has_route": None if routes is None else ifc.name in routes,
            "default_route": metric is not None,
            "default_metric": metric,
            "master": _link_name(ifc / "master"),
        })
    return out


def _kind(base: Path, ifc: Path, vlans: dict[str, str]) -> str:
    """``physical``, ``bond``, ``team``, ``vlan``, ``bridge`` or ``virtual`` (veth, tun, …).

    A physical (or hypervisor-provided) NIC has a ``device`` link. A bond has a ``bonding/``
    directory, a bridge a ``bridge/`` one; a VLAN is listed in ``/proc/net/vlan/config`` or is
    named ``<lower>.<id>`` with a ``lower_<lower>`` link; a team (or any other aggregate) has
    ``lower_*`` links to physical interfaces and is none of the above.
    """
    if (ifc / "device").exists():
        return "physical"
    if (ifc / "bonding").is_dir():
        return "bond"
    if (ifc / "bridge").is_dir():
        return "bridge"
    lowers = [p.name[len("lower_"):] for p in _children(ifc) if p.name.startswith("lower_")]
    name, _, vid = ifc.name.rpartition(".")
    if ifc.name in vlans or (vid.isdigit() and name in lowers):
        return "vlan"
    if lowers and all((base / lower / "device").exists() or (base / lower / "bonding").is_dir()
                      for lower in lowers):
        return "team"
    return "virtual"


def _link_name(path: Path) -> str | None:
    try:
        return Path(os.readlink(path)).name
    except OSError:
        return None


def _read_vlans(root: Path) -> dict[str, str]:
    """VLAN device → lower device, from ``/proc/net/vlan/config`` (``eth0.100 | 100 | eth0``)."""
    text = read_text(root / "proc/net/vlan/config") or ""
    out = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 3 and cells[1].isdigit():
            out[cells[0]] = cells[2]
    return out


def _read_routes(root: Path) -> dict[str, int | None] | None:
    """Interface → metric of its best default route (None: routed, but no default route)."""
    text = read_text(root / "proc/net/route")
    if text is None:
        return None
    routes: dict[str, int | None] = {}
    for line in text.splitlines()[1:]:
        cells = line.split()
        if len(cells) < 7:
            continue
        routes.setdefault(cells[0], None)
        if cells[1] == "00000000" and cells[7:8] in (["00000000"], []):
            try:
                metric = int(cells[6])
            except ValueError:
                continue
            best = routes[cells[0]]
            routes[cells[0]] = metric if best is None else min(best, metric)
    return routes


# ----------------------------------------------------------------------------- PCIe ACS


def read_acs(root: Path) -> tuple[str, tuple[str, ...]]:
    """Bridges with ACS P2P redirect on, from their extended config space.

    Only root can read past the first 64 bytes of config space, so for other users this is
    ``unknown``: saying ``off`` there would hide the very problem this looks for.
    """
    seen_extended = False
    redirecting = []
    for dev in _children(root / "sys/bus/pci/devices"):
        if not (read_text(dev / "class") or "").startswith(_PCI_CLASS_BRIDGE):
            continue
        try:
            config = (dev / "config").read_bytes()
        except OSError:
            continue
        if len(config) < 0x104:
            continue
        seen_extended = True
        control = _acs_control(config)
        if control is not None and control & _ACS_REDIRECT:
            redirecting.append(dev.name)
    if redirecting:
        return "on", tuple(redirecting)
    return ("off", ()) if seen_extended else ("unknown", ())


def _acs_control(config: bytes) -> int | None:
    offset, hops = 0x100, 0
    while 0x100 <= offset <= len(config) - 8 and hops < 64:
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            return None
        if header & 0xFFFF == _PCI_EXT_CAP_ACS:
            (control,) = struct.unpack_from("<H", config, offset + 6)
            return control
        offset, hops = (header >> 20) & 0xFFC, hops + 1
    return None
