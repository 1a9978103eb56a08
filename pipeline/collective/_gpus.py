"""GPU discovery for topology detection: NVML, then ``nvidia-smi``, then the PCI tree in sysfs.

NVML (``pynvml`` from nvidia-ml-py) is preferred because it needs no subprocess and gives the
GPU×GPU link matrix directly. ``nvidia-smi`` is the fallback where the library is absent, and
the PCI scan still finds GPUs (without names or links) on a node whose driver is broken, which
is exactly when a user runs ``pipeline doctor``. On a non-``/`` root nothing is executed:
``<root>/commands/nvidia-smi-query-gpu.txt`` and ``nvidia-smi-topo-m.txt`` stand for the tools.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from pipeline.collective._sysfs import _children, numa_of, read_text

logger = logging.getLogger(__name__)

_TOOL_TIMEOUT_S = 20.0
_QUERY = ["nvidia-smi", "--query-gpu=index,name,pci.bus_id", "--format=csv,noheader"]
_TOPO = ["nvidia-smi", "topo", "-m"]
_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller
# nvmlDeviceGetTopologyCommonAncestor levels, named as nvidia-smi topo -m names them.
_NVML_LEVELS = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}

Matrix = tuple[tuple[str, ...], ...]


def detect(root: Path, live: bool, notes: list[str]) -> tuple[list[dict[str, Any]], str, Matrix]:
    """``(gpus, source, matrix)``; appends to ``notes`` why a better source was not used."""
    if live:
        found = _from_nvml(root, notes)
        if found is not None:
            return found
    query = run_tool(root, live, "nvidia-smi-query-gpu", _QUERY, notes)
    if query is not None:
        gpus = parse_query(query, root)
        topo = run_tool(root, live, "nvidia-smi-topo-m", _TOPO, notes)
        matrix = parse_topo_matrix(topo) if topo else ()
        return gpus, "nvidia-smi", matrix
    gpus = _from_pci(root)
    return gpus, ("sysfs" if gpus else "none"), ()


def run_tool(root: Path, live: bool, key: str, argv: list[str], notes: list[str]) -> str | None:
    """Output of a tool (live) or of its recording under ``<root>/commands`` (fixture trees)."""
    if not live:
        return read_text(root / "commands" / f"{key}.txt")
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
                     "numa_node": numa_of(root / "sys/bus/pci/devices" / bus / "numa_node")})
    return gpus


def parse_topo_matrix(text: str) -> Matrix:
    """GPU×GPU cells of ``nvidia-smi topo -m`` (NIC columns and affinities dropped)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if not lines:
        return ()
    header = lines[0].split()
    n = sum(1 for h in header if re.fullmatch(r"GPU\d+", h))
    rows = []
    for line in lines[1:]:
        cells = line.split()
        if cells and re.fullmatch(r"GPU\d+", cells[0]) and len(cells) > n:
            rows.append(tuple(cells[1:1 + n]))
    return tuple(rows) if len(rows) == n else ()


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


def _from_nvml(root: Path, notes: list[str]) -> tuple[list[dict[str, Any]], str, Matrix] | None:
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
            gpus.append({"index": i, "name": name.decode() if isinstance(name, bytes) else name,
                         "pci_bus_id": bus,
                         "numa_node": numa_of(root / "sys/bus/pci/devices" / bus / "numa_node")})
        matrix = tuple(tuple(_nvml_link(pynvml, a, b) for b in handles) for a in handles)
        return gpus, "nvml", matrix
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
