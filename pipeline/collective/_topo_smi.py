"""Parser for ``nvidia-smi topo -m``: GPU×GPU links, GPU→NIC distances, CPU/NUMA affinity.

Two layouts exist in the field and both are read:

- current drivers: ``NIC0 … NICn`` columns and a ``NIC Legend:`` section naming each one
  (``NIC0: mlx5_0``), plus ``CPU Affinity``, ``NUMA Affinity`` and ``GPU NUMA ID`` columns;
- older drivers: the RDMA device names themselves as columns (``mlx5_0 … mlx5_9``) and only
  ``CPU Affinity`` (sometimes ``NUMA Affinity``).

The header row may carry ANSI underline codes even when stdout is not a terminal
(``\\t\\x1b[4mGPU0 … GPU NUMA ID\\x1b[0m``); they are stripped first. Rows are split on
whitespace, which works for tab-separated output and for copies whose tabs became spaces: the
device cells come first (as many as there are device columns), then the affinities in header
order. ``SOC`` is the old name of ``SYS``. Pure; no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Column names in header order; the affinity names contain spaces, so they are matched whole.
_HEADER_TOKEN = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+")
_AFFINITY = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
_GPU = re.compile(r"GPU(\d+)")
_CELL = re.compile(r"X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC|N/A")
_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


@dataclass(frozen=True)
class TopoMatrix:
    """What one ``topo -m`` output says; empty fields when the text did not say it."""

    gpus: tuple[int, ...] = ()
    """GPU indices in column order."""
    gpu_links: tuple[tuple[str, ...], ...] = ()
    nic_distance: dict[int, dict[str, str]] = field(default_factory=dict)
    """GPU index → RDMA device name → ``PIX`` … ``SYS``."""
    cpu_affinity: dict[int, str] = field(default_factory=dict)
    """GPU index → CPU list such as ``0-55,112-167``."""
    numa_affinity: dict[int, int] = field(default_factory=dict)
    problems: tuple[str, ...] = ()
    """Why part of the text could not be read (shown as notes by ``pipeline doctor``)."""


def parse_topo(text: str) -> TopoMatrix:
    """Read ``nvidia-smi topo -m`` output (either layout, with or without ANSI codes)."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    header_at = next((i for i, ln in enumerate(lines) if _is_header(ln.split())), None)
    if header_at is None:
        return TopoMatrix(problems=("nvidia-smi topo -m: no header row with GPU0",))
    columns = _HEADER_TOKEN.findall(lines[header_at])
    devices = [c for c in columns if c not in _AFFINITY]
    extras = [c for c in columns if c in _AFFINITY]
    legend = _nic_legend(lines)
    names = [legend.get(c, c) for c in devices]
    problems = [f"nvidia-smi topo -m: {c} is not named in the NIC Legend"
                for c in devices if c.startswith("NIC") and c not in legend]
    rows: dict[str, list[str]] = {}
    for line in lines[header_at + 1:]:
        cells = line.split()
        if not cells or cells[0] in rows:
            continue
        if cells[0] == "Legend:":
            break
        rows[cells[0]] = cells[1:]
    gpus = [int(m.group(1)) for c in devices if (m := _GPU.fullmatch(c))]
    links, nic_distance, cpu, numa = [], {}, {}, {}
    for index in gpus:
        cells = rows.get(f"GPU{index}")
        if cells is None or len(cells) < len(devices) or not all(
                _CELL.fullmatch(c) for c in cells[:len(devices)]):
            problems.append(f"nvidia-smi topo -m: row GPU{index} is missing or malformed")
            continue
        by_column = dict(zip(names, cells[:len(devices)], strict=True))
        links.append(tuple(_level(by_column[f"GPU{g}"]) for g in gpus))
        nic_distance[index] = {n: _level(by_column[n]) for n in names if not _GPU.fullmatch(n)}
        affinity = dict(zip(extras, cells[len(devices):], strict=False))
        if affinity.get("CPU Affinity", "N/A") != "N/A":
            cpu[index] = affinity["CPU Affinity"]
        if affinity.get("NUMA Affinity", "").isdigit():
            numa[index] = int(affinity["NUMA Affinity"])
    complete = len(links) == len(gpus)
    return TopoMatrix(gpus=tuple(gpus), gpu_links=tuple(links) if complete else (),
                      nic_distance=nic_distance, cpu_affinity=cpu, numa_affinity=numa,
                      problems=tuple(problems))


def _is_header(tokens: list[str]) -> bool:
    # A data row starts "GPU0 X …"; the header "GPU0 GPU1 …" (or "GPU0 CPU Affinity …").
    return bool(tokens) and tokens[0] == "GPU0" and (
        len(tokens) == 1 or not _CELL.fullmatch(tokens[1]))


def _nic_legend(lines: list[str]) -> dict[str, str]:
    try:
        start = next(i for i, ln in enumerate(lines) if ln.strip() == "NIC Legend:")
    except StopIteration:
        return {}
    return {m.group(1): m.group(2) for ln in lines[start + 1:] if (m := _LEGEND.match(ln))}


def _level(cell: str) -> str:
    return "SYS" if cell == "SOC" else cell
