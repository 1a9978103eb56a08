"""GPU discovery for topology detection: NVML, then ``nvidia-smi``, then the PCI tree in sysfs.

NVML (``pynvml`` from nvidia-ml-py) is preferred because it needs no subprocess and gives the
GPU×GPU link matrix directly. ``nvidia-smi`` is the fallback where the library is absent, and
the PCI scan still finds GPUs (without names or links) on a node whose driver is broken, which
is exactly when a user runs ``pipeline doctor``. GPU→NIC distances come from the NIC columns of
``nvidia-smi topo -m`` when its output is at hand (run beside NVML too, which has no NIC
distances nor NUMA affinity; a VM's sysfs often says NUMA -1), else from the PCI tree
(:mod:`._pci`).

On a non-``/`` root nothing is executed: the recordings in :data:`RECORDINGS` stand for the
tools, and a missing one is a note (the doctor shows it), not a silent fallback.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.collective import _pci
from pipeline.collective._sysfs import _children, numa_of, read_text
from pipeline.collective._topo_smi import parse_topo

logger = logging.getLogger(__name__)

_TOOL_TIMEOUT_S = 20.0
_QUERY = ["nvidia-smi", "--query-gpu=index,name,pci.bus_id,uuid", "--format=csv,noheader"]
_TOPO = ["nvidia-smi", "topo", "-m"]
RECORDINGS = {
    "nvidia-smi-query-gpu": " ".join(_QUERY),
    "nvidia-smi-topo-m": " ".join(_TOPO),
}
"""``<root>/commands/<key>.txt`` → the command whose output it records."""
_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller
# nvmlDeviceGetTopologyCommonAncestor levels, named as nvidia-smi topo -m names them.
_NVML_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

Matrix = tuple[tuple[str, ...], ...]


@dataclass
class Found:
    """GPUs (as dicts for :class:`~pipeline.collective.topology.Gpu`) and where they came from."""

    gpus: list[dict[str, Any]] = field(default_factory=list)
    source: str = "none"
    matrix: Matrix = ()
    nic_source: str = "none"


def detect(root: Path, live: bool, notes: list[str], rdma: list[str]) -> Found:
    """GPUs, their links and their distance to each RDMA device in ``rdma``.

    Appends to ``notes`` why a better source was not used."""
    found = _from_nvml(root, notes) if live else None
    topo_text = None
    if found is not None:  # NVML gives neither NIC distances nor NUMA affinity; topo -m does
        topo_text = run_tool(root, live, "nvidia-smi-topo-m", _TOPO, notes)
    else:
        query = run_tool(root, live, "nvidia-smi-query-gpu", _QUERY, notes)
        if query is not None:
            found = Found(parse_query(query, root), "nvidia-smi")
            topo_text = run_tool(root, live, "nvidia-smi-topo-m", _TOPO, notes)
        else:
            gpus = _from_pci(root)
            found = Found(gpus, "sysfs" if gpus else "none")
            if gpus:
                notes.append("GPUs found by a PCI scan: no names and no GPU×GPU links")
    if topo_text is not None:
        _apply_topo(found, topo_text, rdma, notes)
    if found.gpus and rdma and found.nic_source == "none":
        _nic_distance_from_pci(found, root, rdma, notes)
    for gpu in found.gpus:
        gpu.setdefault("nic_distance", {})
        if gpu.get("cpu_affinity") is None:
            gpu["cpu_affinity"] = _pci.local_cpus(root, gpu["pci_bus_id"], gpu["numa_node"])
    return found


def _apply_topo(found: Found, text: str, rdma: list[str], notes: list[str]) -> None:
    topo = parse_topo(text)
    notes.extend(topo.problems)
    by_index = {g["index"]: g for g in found.gpus}
    if topo.gpus and sorted(topo.gpus) == sorted(by_index):
        found.matrix = topo.gpu_links
    elif topo.gpus:
        notes.append(f"nvidia-smi topo -m shows GPUs {list(topo.gpus)} but the query found "
                     f"{sorted(by_index)}; its matrix is ignored")
        return
    for index, gpu in by_index.items():
        if index in topo.cpu_affinity:
            gpu["cpu_affinity"] = topo.cpu_affinity[index]
        if gpu["numa_node"] is None and index in topo.numa_affinity:
            gpu["numa_node"] = topo.numa_affinity[index]
        if index in topo.nic_distance:
            gpu["nic_distance"] = {n: d for n, d in topo.nic_distance[index].items()
                                   if n in rdma}
    unlisted = sorted(set(rdma) - {n for d in topo.nic_distance.values() for n in d})
    if rdma and not unlisted:
        found.nic_source = "nvidia-smi"
    elif unlisted:
        notes.append(f"nvidia-smi topo -m does not list RDMA devices {', '.join(unlisted)}; "
                     "their distance to the GPUs comes from the PCI tree")


def _nic_distance_from_pci(found: Found, root: Path, rdma: list[str], notes: list[str]) -> None:
    missing = set()
    for gpu in found.gpus:
        known = gpu.setdefault("nic_distance", {})
        for name in rdma:
            if name in known:
                continue
            level = _pci.device_distance(root, gpu["pci_bus_id"],
                                         root / "sys/class/infiniband" / name / "device")
            if level is None:
                missing.add(name)
            else:
                known[name] = level
    if missing:
        notes.append(f"GPU↔NIC distance unknown for {', '.join(sorted(missing))}: no PCI path "
                     "in sysfs (a VM, or a capture without the /sys/devices links)")
    if any(g["nic_distance"] for g in found.gpus):
        found.nic_source = "sysfs" if found.nic_source == "none" else found.nic_source


def run_tool(root: Path, live: bool, key: str, argv: list[str], notes: list[str]) -> str | None:
    """Output of a tool (live) or of its recording under ``<root>/commands`` (fixture trees)."""
    if not live:
        path = root / "commands" / f"{key}.txt"
        text = read_text(path)
        if text is None:
            notes.append(f"{path} not found (the output of `{' '.join(argv)}`)")
        return text
    if shutil.which(argv[0]) is None:
        notes.append(f"{argv[0]}: not on PATH")
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=_TOOL_TIMEOUT_S,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        notes.append(f"{' '.join(argv)}: {exc}")
        return None
    if done.returncode != 0:
        notes.append(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()[:200]}")
        return None
    return done.stdout


def parse_query(text: str, root: Path) -> list[dict[str, Any]]:
    gpus = []
    for line in text.splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) < 3 or not cells[0].isdigit():
            continue
        bus = _sysfs_bus_id(cells[2])
        gpus.append({"index": int(cells[0]), "name": cells[1], "pci_bus_id": bus,
                     "uuid": cells[3] if len(cells) > 3 and cells[3] else None,
                     "numa_node": numa_of(root / "sys/bus/pci/devices" / bus / "numa_node")})
    return gpus


def _sysfs_bus_id(bus_id: str) -> str:
    # NVML and nvidia-smi write "00000000:17:00.0"; sysfs uses "0000:17:00.0", lower case.
    bus_id = bus_id.strip().lower()
    domain, _, rest = bus_id.partition(":")
    return f"{domain[-4:]}:{rest}" if rest else bus_id


def _from_pci(root: Path) -> list[dict[str, Any]]:
    gpus = []
    for dev in _children(root / "sys/bus/pci/devices"):
        if read_text(dev / "vendor") != _NVIDIA_VENDOR:
            continue
        if not (read_text(dev / "class") or "").startswith(_GPU_CLASSES):
            continue
        device_id = read_text(dev / "device") or "?"
        gpus.append({"index": len(gpus), "name": f"NVIDIA GPU (PCI device {device_id})",
                     "pci_bus_id": dev.name, "numa_node": numa_of(dev / "numa_node")})
    return gpus


def _from_nvml(root: Path, notes: list[str]) -> Found | None:
    try:
        import pynvml
    except ImportError:
        notes.append("nvml: nvidia-ml-py is not installed")
        return None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        notes.append(f"nvml: {exc}")
        return None
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                   for i in range(pynvml.nvmlDeviceGetCount())]
        gpus = []
        for i, handle in enumerate(handles):
            name = pynvml.nvmlDeviceGetName(handle)
            bus = pynvml.nvmlDeviceGetPciInfo(handle).busId
            bus = _sysfs_bus_id(bus.decode() if isinstance(bus, bytes) else bus)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                         "pci_bus_id": bus,
                         "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid,
                         "numa_node": numa_of(root / "sys/bus/pci/devices" / bus / "numa_node")})
        matrix = tuple(tuple(_nvml_link(pynvml, a, b) for b in handles) for a in handles)
        return Found(gpus, "nvml", matrix)
    except pynvml.NVMLError as exc:
        notes.append(f"nvml: {exc}")
        return None
    finally:
        pynvml.nvmlShutdown()


def _nvml_link(pynvml: Any, a: Any, b: Any) -> str:
    if a is b:
        return "X"
    try:
        nvlink = pynvml.nvmlDeviceGetP2PStatus(a, b, pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
        if nvlink == pynvml.NVML_P2P_STATUS_OK:
            return "NV"
        level = pynvml.nvmlDeviceGetTopologyCommonAncestor(a, b)
    except pynvml.NVMLError:
        return "?"
    return _NVML_LEVELS.get(int(level), "?")
