"""GPU↔NIC distance from the PCI tree in sysfs, for when ``nvidia-smi`` is missing.

``/sys/bus/pci/devices/<bdf>`` is a relative link into ``/sys/devices/pci<domain>:<bus>/…``,
one path component per bridge on the way down from the host bridge. Two devices are as far
apart as the deepest bridge they share, named as ``nvidia-smi topo -m`` names it:

=====  ===============================================================================
PIX    they meet inside one PCIe switch (at most one bridge below it on either side)
PXB    they meet below the same root port, through more than one switch
PHB    they meet only at the host bridge (same ``pci<domain>:<bus>`` root)
NODE   different host bridges, same NUMA node
SYS    different NUMA nodes (the CPU interconnect is crossed)
=====  ===============================================================================

Runs in: driver, Train worker, Ray task; reads files only.
"""

from __future__ import annotations

import os
from pathlib import Path

from pipeline.collective._sysfs import numa_of, read_text

LEVELS = ("PIX", "PXB", "PHB", "NODE", "SYS")
"""Nearest first: the order GPU→NIC pairing sorts by."""


def pci_path(device: Path) -> tuple[str, ...] | None:
    """``("pci0000:15", "0000:15:01.0", …, "0000:18:00.0")`` for a sysfs device link."""
    try:
        real = Path(os.path.realpath(device))
    except OSError:
        return None
    parts = real.parts
    roots = [i for i, p in enumerate(parts) if p.startswith("pci") and ":" in p]
    if not roots or not real.exists():
        return None
    return tuple(parts[roots[-1]:])


def distance(a: tuple[str, ...], b: tuple[str, ...], numa_a: int | None,
             numa_b: int | None) -> str:
    """The ``topo -m`` level between two devices given their :func:`pci_path`."""
    if a[0] != b[0]:
        # Unknown NUMA on both sides is a single-socket board (the kernel writes -1).
        same_node = numa_a == numa_b
        return "NODE" if same_node else "SYS"
    below_a, below_b = a[1:], b[1:]
    shared = 0
    for x, y in zip(below_a, below_b, strict=False):
        if x != y:
            break
        shared += 1
    if shared == 0:
        return "PHB"
    # Bridges between the shared one and each device: a switch's downstream port is one.
    hops = max(len(below_a) - shared - 1, len(below_b) - shared - 1)
    return "PIX" if hops <= 1 else "PXB"


def device_distance(root: Path, gpu_bus_id: str, nic_device: Path) -> str | None:
    """Distance between a GPU (by sysfs bus id) and a NIC (its sysfs ``device`` link)."""
    gpu = root / "sys/bus/pci/devices" / gpu_bus_id
    a, b = pci_path(gpu), pci_path(nic_device)
    if a is None or b is None:
        return None
    return distance(a, b, numa_of(gpu / "numa_node"), numa_of(nic_device / "numa_node"))


def local_cpus(root: Path, bus_id: str, numa_node: int | None) -> str | None:
    """CPUs near a PCI device: its ``local_cpulist``, else its NUMA node's ``cpulist``."""
    listed = read_text(root / "sys/bus/pci/devices" / bus_id / "local_cpulist")
    if listed:
        return listed
    if numa_node is None:
        return None
    return read_text(root / f"sys/devices/system/node/node{numa_node}/cpulist")


def parse_cpulist(text: str) -> set[int]:
    """``"0-3,8,10-11"`` → ``{0, 1, 2, 3, 8, 10, 11}``; raises ValueError on bad text."""
    cpus: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus
