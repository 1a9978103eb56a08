"""The local Ray's watchdog: when the driver that started it dies without shutting it down
(SIGKILL, the OOM killer, a second Ctrl-C), that Ray's processes go within seconds.

    python -m pipeline.cluster.watchdog DRIVER_PID TOKEN

Ray ties its GCS and raylet to the driver, but the agents and workers the raylet starts outlive
it by minutes, holding memory and ports. :func:`pipeline.cluster.session.ray_session` sets
``FEEDLINE_RAY_OWNER=TOKEN`` (:data:`OWNER`) in the driver's environment before it starts Ray,
so every process of that Ray inherits it; then it starts this process, in a session of its own
(a terminal's Ctrl-C does not reach it), and stops it after ``ray.shutdown``.

The watchdog waits for the driver's death (pid and start time: never a reused pid), learning
that Ray's processes meanwhile (:class:`RayProcesses`). Then it sends SIGTERM to every one,
SIGKILL after ``GRACE_S`` to those still there, and exits. A SIGTERM from the driver (after
``ray.shutdown``) releases it instead: it gives what ``ray.shutdown`` left running (Ray's
agents outlive their raylet by seconds to minutes) ``LEAVE_S`` to go by itself, then
terminates the rest the same way. So a driver that dies at any moment of its stop (a second
Ctrl-C while it writes its summary) leaves nothing behind. A SIGUSR1 from the driver says its
run is done and it exits without shutting Ray down (``pipeline run`` gives the prompt back at
once): the watchdog stops that Ray once the driver is gone, as after a death. The token
finds what a process tree cannot: a worker the raylet was starting when the driver's death
took the raylet along is an orphan, re-parented to init; the tree finds what the token cannot
(an agent whose title overwrote its environment). What it did goes to stderr, which the
session points at Ray's log folder. No Ray import: it must work while Ray is what is failing.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from pipeline.procfs import PROC, started, stat

OWNER = "FEEDLINE_RAY_OWNER"
POLL_S = 0.5
SCAN_S = 2.0  # how often, while the driver lives, the watchdog learns its Ray's processes
GRACE_S = 3.0
LEAVE_S = 5.0

_released: list[int] = []  # the driver's SIGTERM: it shut its Ray down itself
_handed: list[int] = []  # the driver's SIGUSR1: its run is done; it exits, leaving its Ray here


class RayProcesses:
    """The processes of one local Ray: those whose environment holds ``FEEDLINE_RAY_OWNER=token``,
    their descendants, and those found before that still run (pid and start: never a reused
    pid).

    The environment alone misses some: Ray's agents set their process title, which overwrites
    the start of the memory ``/proc/PID/environ`` reads, the token with it or not depending on
    the environment's order. Each is a child of the raylet, which carries the token, so a scan
    while the raylet lives finds it; after the driver's death has taken the raylet along, the
    orphaned agent is still known from that scan."""

    def __init__(self, token: str):
        self.entry = f"{OWNER}={token}".encode()
        self.known: dict[int, int] = {}  # pid -> start

    def scan(self) -> dict[int, int]:
        """``pid -> start`` of this Ray's live processes, read fresh."""
        stats = {}
        for path in PROC.iterdir():
            if path.name.isdigit() and int(path.name) != os.getpid():
                st = stat(int(path.name))
                if st is not None and st.state != "Z":
                    stats[int(path.name)] = st
        live = {pid: start for pid, start in self.known.items()
                if pid in stats and stats[pid].start == start}
        live |= {pid: st.start for pid, st in stats.items()
                 if pid not in live and self._carries(pid)}
        children: dict[int, list[int]] = {}
        for pid, st in stats.items():
            children.setdefault(st.ppid, []).append(pid)
        todo = list(live)
        while todo:
            for child in children.get(todo.pop(), ()):
                if child not in live:
                    live[child] = stats[child].start
                    todo.append(child)
        self.known = live
        return live

    def _carries(self, pid: int) -> bool:
        try:
            return self.entry in (PROC / str(pid) / "environ").read_bytes().split(b"\0")
        except OSError:  # gone meanwhile, or not ours to read
            return False


def wait_for_death(driver: int, ray: RayProcesses, poll_s: float = POLL_S,
                   scan_s: float = SCAN_S) -> None:
    """Return when ``driver`` is gone, or has released the watchdog; meanwhile keep ``ray``'s
    processes known."""
    start = started(driver)
    scanned = -scan_s
    while start is not None and started(driver) == start and not _released:
        if time.monotonic() - scanned >= scan_s:
            ray.scan()
            scanned = time.monotonic()
        time.sleep(poll_s)


def wait_for_leave(ray: RayProcesses, leave_s: float = LEAVE_S) -> None:
    deadline = time.monotonic() + leave_s
    while ray.scan() and time.monotonic() < deadline:
        time.sleep(0.1)


def terminate(ray: RayProcesses, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM ``ray``'s processes (those that appear meanwhile included), SIGKILL those still
    there after ``grace_s``; the pids it signalled."""
    signalled: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        sent: set[int] = set()
        deadline = time.monotonic() + wait_s
        # each signal reaches every process found at least once: on a loaded machine one scan
        # of /proc can take longer than the whole wait
        while live := ray.scan():
            for pid, start in live.items():
                if pid not in sent and started(pid) == start:
                    try:
                        os.kill(pid, sig)
                    except ProcessLookupError:  # gone meanwhile
                        pass
                    sent.add(pid)
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
        signalled |= sent
    return sorted(signalled)


def main(argv: list[str]) -> int:
    driver, token = int(argv[0]), argv[1]
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the driver's death or SIGTERM ends it
    signal.signal(signal.SIGTERM, lambda signum, frame: _released.append(signum))
    signal.signal(signal.SIGUSR1, lambda signum, frame: _handed.append(signum))
    ray = RayProcesses(token)
    # said once the handlers are in place and the first scan is done (tests wait for it)
    print(f"feedline watchdog: watching driver {driver} and the {len(ray.scan())} processes "
          "of its Ray", file=sys.stderr, flush=True)
    wait_for_death(driver, ray)
    if _released:
        wait_for_leave(ray)
        if killed := terminate(ray):
            print(f"feedline watchdog: {len(killed)} processes outlived ray.shutdown of driver "
                  f"{driver}; terminated: {killed}", file=sys.stderr, flush=True)
        return 0
    killed = terminate(ray)
    how = ("finished and left its Ray to the watchdog" if _handed
           else "exited without stopping its Ray")
    print(f"feedline watchdog: driver {driver} {how}; terminated {len(killed)} processes: "
          f"{killed}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
