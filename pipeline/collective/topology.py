"""What one node offers for collectives: GPUs (with their distance to every RDMA device and
their local CPUs), RDMA ports, GPUDirect, NICs (physical, bonds, teams, VLANs; bridges and
veths marked virtual; default routes with their metrics), PCIe ACS.

Detection runs once per node (in a Train worker or a ``pipeline doctor`` task) and returns a
frozen :class:`Topology`; everything downstream (advice, link classification, the doctor
table) is a pure function of it. The root is configurable so a test, or a user sending a
captured ``/sys`` + ``/proc`` tree, gets the same answer as the live machine. With a root other
than ``/`` no tool is executed: recorded command output under ``<root>/commands/`` is read
instead. Anything that cannot be read is ``"unknown"`` or ``None``, never an exception; why a
source was skipped is kept in ``Topology.notes`` so the doctor can show it.

Runs in: driver, Train worker, Ray task. Picklable (plain frozen dataclasses).
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.collective import _gpus, _sysfs

logger = logging.getLogger(__name__)

GDR_ON = ("nvidia_peermem", "nv_peer_mem", "dmabuf")


@dataclass(frozen=True, kw_only=True)
class Gpu:
    """One NVIDIA GPU and where it sits on the PCIe/NUMA tree."""

    index: int
    name: str
    pci_bus_id: str
    numa_node: int | None
    uuid: str | None = None
    cpu_affinity: str | None = None
    """CPUs local to the GPU (``0-55,112-167``): ``topo -m``'s column or ``local_cpulist``."""
    nic_distance: dict[str, str] = field(default_factory=dict)
    """RDMA device name → ``PIX``, ``PXB``, ``PHB``, ``NODE`` or ``SYS`` (every device known)."""


@dataclass(frozen=True, kw_only=True)
class RdmaPort:
    """One port of an RDMA device (``/sys/class/infiniband/<dev>/ports/<n>``)."""

    port: int
    state: str
    """``ACTIVE``, ``DOWN``, ... or ``unknown``."""
    phys_state: str
    """``LinkUp``, ``Disabled``, ``Polling`` (no peer), ... or ``unknown``."""
    rate_gbps: float | None
    link_layer: str
    """``InfiniBand``, ``Ethernet`` (RoCE) or ``unknown``."""
    roce_v2_gid_index: int | None
    """GID index of a RoCE v2 entry, preferring an IPv4-mapped address; None if there is none."""
    netdev: str | None

    @property
    def active(self) -> bool:
        return self.state == "ACTIVE"

    @property
    def kind(self) -> str:
        return {"InfiniBand": "InfiniBand", "Ethernet": "RoCE"}.get(self.link_layer, "unknown")


@dataclass(frozen=True, kw_only=True)
class RdmaDevice:
    """One RDMA device (an HCA such as ``mlx5_0``)."""

    name: str
    numa_node: int | None
    pci_bus_id: str | None
    ports: tuple[RdmaPort, ...]

    @property
    def active_ports(self) -> list[RdmaPort]:
        return [p for p in self.ports if p.active]


@dataclass(frozen=True, kw_only=True)
class NetInterface:
    """One entry of ``/sys/class/net``."""

    name: str
    up: bool
    speed_mbps: int | None
    kind: str
    """``physical``, ``bond``, ``team``, ``vlan``, ``bridge``, ``virtual`` or ``loopback``."""
    virtual: bool
    """A bridge, veth, docker0, ifb or lo: never a NIC for inter-node traffic. Bonds, teams and
    VLANs are not virtual in this sense: they carry the node's traffic over physical ports."""
    loopback: bool
    numa_node: int | None
    has_route: bool | None
    """An IPv4 route uses it (``/proc/net/route``); None when the route table is unreadable."""
    default_route: bool
    default_metric: int | None
    """Metric of its default route; the lowest metric is the route the kernel uses."""
    master: str | None
    """The bond, team or bridge this interface is a port of (its ``master`` link)."""


@dataclass(frozen=True, kw_only=True)
class Topology:
    """Everything collective advice needs to know about one node."""

    hostname: str
    gpus: tuple[Gpu, ...]
    gpu_source: str
    """``nvml``, ``nvidia-smi``, ``sysfs`` or ``none``."""
    nic_distance_source: str
    """Where ``Gpu.nic_distance`` came from: ``nvidia-smi``, ``sysfs`` (PCI tree) or ``none``."""
    gpu_matrix: tuple[tuple[str, ...], ...]
    """GPU×GPU cells as ``nvidia-smi topo -m`` names them (``X``, ``NV18``, ``PIX``, ``SYS``).

    Empty when unknown.
    """
    rdma: tuple[RdmaDevice, ...]
    gdr: str
    """GPUDirect RDMA: ``nvidia_peermem``, ``nv_peer_mem``, ``dmabuf``, ``off`` or ``unknown``."""
    interfaces: tuple[NetInterface, ...] | None
    """None when ``/sys/class/net`` cannot be read."""
    acs: str
    """PCIe ACS redirect on some bridge: ``on``, ``off`` or ``unknown``."""
    acs_bridges: tuple[str, ...]
    notes: tuple[str, ...]

    @property
    def active_rdma_ports(self) -> list[tuple[RdmaDevice, RdmaPort]]:
        return [(d, p) for d in self.rdma for p in d.ports if p.active]

    @property
    def interconnect(self) -> str:
        """GPU↔GPU inside the node: ``nvlink``, ``pcie``, ``single-gpu``, ``none``, ``unknown``."""
        if not self.gpus:
            return "none"
        if len(self.gpus) == 1:
            return "single-gpu"
        if not self.gpu_matrix:
            return "unknown"
        cells = [c for row in self.gpu_matrix for c in row]
        return "nvlink" if any(c.startswith("NV") for c in cells) else "pcie"

    @property
    def network(self) -> str:
        """Node↔node: ``infiniband``, ``roce``, ``ethernet``, ``loopback`` or ``unknown``."""
        kinds = {p.kind for _, p in self.active_rdma_ports}
        if "InfiniBand" in kinds:
            return "infiniband"
        if "RoCE" in kinds:
            return "roce"
        if self.interfaces is None:
            return "unknown"
        if any(i.up and not i.loopback for i in self.interfaces):
            return "ethernet"
        return "loopback"

    def as_dict(self) -> dict[str, Any]:
        """JSON-able form (tuples become lists), with the derived fields included."""
        out = dataclasses.asdict(self)
        out["interconnect"] = self.interconnect
        out["network"] = self.network
        return out


def detect_topology(root: str | Path = "/") -> Topology:
    """Detect this node's topology, reading files under ``root`` (tools only when root is ``/``)."""
    root = Path(root)
    live = root == Path("/")
    notes: list[str] = []
    rdma = _sysfs.read_rdma(root)
    found = _gpus.detect(root, live, notes, [d["name"] for d in rdma])
    interfaces = _sysfs.read_interfaces(root)
    if interfaces is None:
        notes.append(f"network interfaces unknown: {root / 'sys/class/net'} is not readable")
    acs, bridges = _sysfs.read_acs(root)
    topology = Topology(
        hostname=_hostname(root, live),
        gpus=tuple(Gpu(**g) for g in found.gpus),
        gpu_source=found.source,
        nic_distance_source=found.nic_source,
        gpu_matrix=found.matrix,
        rdma=tuple(
            RdmaDevice(name=d["name"], numa_node=d["numa_node"], pci_bus_id=d["pci_bus_id"],
                       ports=tuple(RdmaPort(**p) for p in d["ports"]))
            for d in rdma),
        gdr=_sysfs.read_gdr(root),
        interfaces=None if interfaces is None else tuple(NetInterface(**i) for i in interfaces),
        acs=acs,
        acs_bridges=bridges,
        notes=tuple(notes),
    )
    logger.debug("topology of %s: %s", topology.hostname, topology)
    return topology


def _hostname(root: Path, live: bool) -> str:
    if live:
        return socket.gethostname()
    recorded = _sysfs.read_text(root / "etc/hostname")
    return recorded or root.name
