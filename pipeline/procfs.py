"""A process and its descendants, read from Linux's ``/proc`` (no Ray, no psutil).

Used by the ingest and soak benchmarks' resource probes and by the local Ray's watchdog
(:mod:`pipeline.cluster.watchdog`), which stops that Ray's processes when the driver dies.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import NamedTuple

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
PROC = Path("/proc")


class Stat(NamedTuple):
    name: str
    state: str  # "R", "S", ..., "Z" for a zombie (exited, not yet waited for)
    ppid: int
    cpu_s: float  # utime + stime
    start: int  # clock ticks from boot to the process's start: a reused pid has another


def stat(pid: int) -> Stat | None:
    """``/proc/PID/stat`` of ``pid``, or None if it is gone."""
    try:
        # bytes: the kernel cuts a name at 15 bytes, in the middle of a character if need be
        raw = (PROC / str(pid) / "stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    # the name is in parentheses and may itself hold spaces or parentheses
    name, rest = raw[raw.index("(") + 1:raw.rindex(")")], raw[raw.rindex(")") + 2:].split()
    return Stat(name, rest[0], int(rest[1]), (int(rest[11]) + int(rest[12])) / _TICK,
                int(rest[19]))


class ProcessTree:
    """``pid -> Stat`` for root processes and all their descendants, read fresh.

    A parent never changes while a process lives (orphans are re-parented, and then no longer
    ours), so each pid's parent is read once: a scan lists ``/proc`` and reads ``stat`` only
    for new pids and the tree's own, not for every process of a shared machine.
    """

    def __init__(self, *roots: int):
        self.roots = roots
        self._parent: dict[int, int] = {}

    def scan(self) -> dict[int, Stat]:
        pids = {int(e) for e in os.listdir(PROC) if e.isdigit()} if PROC.is_dir() else set()
        for gone in self._parent.keys() - pids:
            del self._parent[gone]
        for pid in pids - self._parent.keys():
            st = stat(pid)
            if st is not None:
                self._parent[pid] = st.ppid
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parent.items():
            children.setdefault(ppid, []).append(pid)
        tree: dict[int, Stat] = {}
        todo = list(self.roots)
        while todo:
            pid = todo.pop()
            st = stat(pid)
            if st is not None and pid not in tree:
                tree[pid] = st
                todo.extend(children.get(pid, ()))
        return tree


def started(pid: int) -> int | None:
    """The start time of a running ``pid`` (None once it exited): with the pid, it names one
    process, never a later one that reuses the pid."""
    st = stat(pid)
    return st.start if st is not None and st.state != "Z" else None


def alive(pid: int) -> bool:
    """Running, not exited (a zombie has exited; only its parent's wait is due)."""
    st = stat(pid)
    return st is not None and st.state != "Z"


def process_start(pid: int | None = None) -> float:
    """Unix time ``pid`` (this process by default) started, or now when /proc cannot say."""
    st = stat(os.getpid() if pid is None else pid)
    try:
        with open(PROC / "stat") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith("btime"))
    except (OSError, StopIteration):
        return time.time()
    return boot + st.start / _TICK if st is not None else time.time()
