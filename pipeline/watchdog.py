"""The local Ray's watchdog: when the driver that started it dies without shutting it down
(SIGKILL, the OOM killer, a second Ctrl-C), that Ray's processes go within seconds.

    python -m pipeline.watchdog DRIVER_PID ROOT_PID [ROOT_PID ...]

Ray ties its GCS and raylet to the driver, but the agents and workers the raylet starts outlive
it by minutes, holding memory and ports. :func:`pipeline.train.session.ray_session` starts this
process for a Ray it starts, in a session of its own (a terminal's Ctrl-C does not reach it),
with the Ray processes ray.init started as roots, and stops it after ``ray.shutdown``.

Every ``POLL_S`` it records the processes under the roots with their start times. Once the
driver is gone it sends SIGTERM to every one of them still alive (same start time: never a
reused pid) and to those they started since, SIGKILL after ``GRACE_S``, and exits. What it did
goes to stderr, which the session points at Ray's log folder. No Ray import: it must work while
Ray is what is failing.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from pipeline.procfs import ProcessTree, started

POLL_S = 0.5
GRACE_S = 3.0


def watch(driver: int, roots: list[int], poll_s: float = POLL_S) -> dict[int, int]:
    """Block while ``driver`` lives; return ``pid -> start`` of every process seen under
    ``roots`` meanwhile."""
    driver_start = started(driver)
    seen: dict[int, int] = {}
    tree = ProcessTree(*roots)
    while driver_start is not None and started(driver) == driver_start:
        for pid, st in tree.scan().items():
            seen.setdefault(pid, st.start)
        time.sleep(poll_s)
    return seen


def terminate(seen: dict[int, int], grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM the processes of ``seen`` still alive and their descendants, SIGKILL what is
    left after ``grace_s``; the pids it signalled."""
    live = {pid: start for pid, start in seen.items() if started(pid) == start}
    live |= {pid: st.start for pid, st in ProcessTree(*live).scan().items()
             if st.state != "Z"}
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 0.0)):
        for pid, start in live.items():
            if started(pid) == start:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:  # gone meanwhile
                    pass
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(started(p) == s for p, s in live.items()):
            time.sleep(0.1)
    return sorted(live)


def main(argv: list[str]) -> int:
    driver, *roots = (int(a) for a in argv)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the driver's death or SIGTERM ends it
    seen = watch(driver, roots)
    killed = terminate(seen)
    print(f"feedline watchdog: driver {driver} exited without stopping its Ray; "
          f"terminated {len(killed)} processes: {killed}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
