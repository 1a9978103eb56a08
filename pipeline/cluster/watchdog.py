"""The local Ray's watchdog: when the driver that started it dies without shutting it down
(SIGKILL, the OOM killer, a second Ctrl-C), that Ray's processes go within seconds.

    python -m pipeline.cluster.watchdog DRIVER_PID TOKEN

Ray ties its GCS and raylet to the driver, but the agents and workers the raylet starts outlive
it by minutes, holding memory and ports. :func:`pipeline.cluster.session.ray_session` sets
``FEEDLINE_RAY_OWNER=TOKEN`` (:data:`OWNER`) in the driver's environment before it starts Ray,
so every process of that Ray inherits it; then it starts this process, in a session of its own
(a terminal's Ctrl-C does not reach it), and stops it after ``ray.shutdown``.

The watchdog waits for the driver's death (pid and start time: never a reused pid). Then it
sends SIGTERM to every process whose environment carries the token, SIGKILL after ``GRACE_S``
to those still there, and exits. A SIGTERM from the driver (after ``ray.shutdown``) releases it
instead: it gives what ``ray.shutdown`` left running (Ray's agents outlive their raylet by
seconds to minutes) ``LEAVE_S`` to go by itself, then terminates the rest the same way. So a
driver that dies at any moment of its stop (a second Ctrl-C while it writes its summary)
leaves nothing behind. The token finds what a process tree cannot: a worker the
raylet was starting when the driver's death took the raylet along is an orphan, re-parented to
init. What it did goes to stderr, which the session points at Ray's log folder. No Ray import:
it must work while Ray is what is failing.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from pipeline.procfs import PROC, started

OWNER = "FEEDLINE_RAY_OWNER"
POLL_S = 0.5
GRACE_S = 3.0
LEAVE_S = 5.0

_released: list[int] = []  # the driver's SIGTERM: it shut its Ray down itself


def carrying(token: str) -> dict[int, int]:
    """``pid -> start`` of the live processes, other than this one, whose environment holds
    ``FEEDLINE_RAY_OWNER=token``."""
    entry = f"{OWNER}={token}".encode()
    found = {}
    for path in PROC.iterdir():
        if not path.name.isdigit() or int(path.name) == os.getpid():
            continue
        try:
            environ = (path / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        if entry in environ.split(b"\0") and (start := started(int(path.name))) is not None:
            found[int(path.name)] = start
    return found


def wait_for_death(driver: int, poll_s: float = POLL_S) -> None:
    """Return when ``driver`` is gone, or has released the watchdog."""
    start = started(driver)
    while start is not None and started(driver) == start and not _released:
        time.sleep(poll_s)


def wait_for_leave(token: str, leave_s: float = LEAVE_S) -> None:
    deadline = time.monotonic() + leave_s
    while carrying(token) and time.monotonic() < deadline:
        time.sleep(0.1)


def terminate(token: str, grace_s: float = GRACE_S) -> list[int]:
    """SIGTERM the processes carrying ``token`` (those that appear meanwhile included), SIGKILL
    those still there after ``grace_s``; the pids it signalled."""
    signalled: set[int] = set()
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 1.0)):
        sent: set[int] = set()
        deadline = time.monotonic() + wait_s
        # each signal reaches every process found at least once: on a loaded machine one scan
        # of /proc can take longer than the whole wait
        while live := carrying(token):
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
    print(f"feedline watchdog: watching driver {driver}", file=sys.stderr, flush=True)
    wait_for_death(driver)
    if _released:
        wait_for_leave(token)
        if killed := terminate(token):
            print(f"feedline watchdog: {len(killed)} processes outlived ray.shutdown of driver "
                  f"{driver}; terminated: {killed}", file=sys.stderr, flush=True)
        return 0
    killed = terminate(token)
    print(f"feedline watchdog: driver {driver} exited without stopping its Ray; "
          f"terminated {len(killed)} processes: {killed}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
