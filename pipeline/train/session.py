"""Connecting the driver to Ray: join a cluster, reuse an embedding driver's Ray, or start one.

Order of precedence: ``--address``/``run.address``, then ``RAY_ADDRESS``, then a Ray the caller
already initialised (embedding: used and left running), else a local Ray sized from this
machine with the dashboard on 127.0.0.1 only, shut down when the run ends.

Before joining ``host:port``, the driver checks that something accepts connections there
(:func:`wait_for_gcs`, ``run.connect_timeout_s``): Ray's own client retries an address where
nothing listens forever, deaf to Ctrl-C. ``ray://`` (Ray Client) and ``auto`` are passed to Ray
unchecked.

Stopped (Ctrl-C, SIGTERM: :mod:`pipeline.train.stop`) while Ray starts, what it started goes too;
a second Ctrl-C cannot wait for ``ray.shutdown`` and terminates the local Ray's processes
(:func:`terminate_local_ray`).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from pipeline.procfs import ProcessTree, alive
from pipeline.train.stop import keep_sigterm

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class RaySession:
    address: str
    mode: str  # "joined", "embedded" or "local"

    @property
    def logs(self) -> str | None:
        """This node's Ray session log folder (workers' stdout/stderr), when Ray says."""
        import ray

        node = getattr(ray._private.worker, "_global_node", None)  # no public API for this
        return node.get_logs_dir_path() if node is not None else None


#: Seconds to wait for a cluster's GCS to accept a connection (``run.connect_timeout_s``).
CONNECT_TIMEOUT_S = 30.0


def wait_for_gcs(address: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Return once ``host:port`` accepts a TCP connection; a ``ConnectionError`` naming the
    address, the tries and the remedy after ``timeout_s``. Other address forms pass."""
    host, sep, port = address.rpartition(":")
    if "://" in address or not sep or not port.isdigit():
        return
    deadline, tries, last = time.monotonic() + timeout_s, 0, None
    while True:
        tries += 1
        left = deadline - time.monotonic()
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=max(0.1, min(2.0, left))):
                return
        except OSError as exc:
            last = exc
        if time.monotonic() + 0.5 >= deadline:
            break
        time.sleep(0.5)
    raise ConnectionError(
        f"run.address / --address / RAY_ADDRESS ({address!r}): nothing accepted a connection "
        f"there in {timeout_s:g} s ({tries} tries; last: {last}). Start the cluster (`ray start "
        f"--head` on that machine), check the host and GCS port (`ray status` on the head "
        f"prints it), or leave the address empty for a local Ray; run.connect_timeout_s sets "
        f"the wait")


@contextmanager
def ray_session(address: str | None = "", num_cpus: int = 0, *, dashboard: bool = True,
                log_to_driver: bool = False,
                connect_timeout_s: float = CONNECT_TIMEOUT_S) -> Iterator[RaySession]:
    """Connect for the duration of the block; disconnect (or stop) only what this call started.

    Workers' output stays in Ray's log folder (``RaySession.logs``) unless ``log_to_driver``:
    the console shows Feedline's progress, results, warnings and errors, not Ray's chatter."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS", "")
    if address == "local":  # Ray's own word for "start a new local cluster"
        address = ""
    if ray.is_initialized():
        yield RaySession(ray.get_runtime_context().gcs_address, "embedded")
        return
    if address:
        wait_for_gcs(address, connect_timeout_s)
        _init(address=address, log_to_driver=log_to_driver)
        mode = "joined"
    else:
        cpus = num_cpus or os.cpu_count() or 1
        # The dashboard serves Ray's state API (Ray Train polls it) and job submission; bind it
        # to loopback so a local run exposes nothing to the network.
        # address="local": never attach to another Ray that `ray start` left on this machine.
        _init(address="local", num_cpus=cpus, include_dashboard=dashboard,
              dashboard_host="127.0.0.1", log_to_driver=log_to_driver)
        mode = "local"
    try:
        yield RaySession(ray.get_runtime_context().gcs_address, mode)
    finally:
        ray.shutdown()


def _init(**kwargs) -> None:
    """``ray.init``, stoppable: stopped (Ctrl-C, SIGTERM) while Ray starts, what it started
    goes too, and the caller's SIGTERM handler stays in place (:func:`keep_sigterm`)."""
    import ray

    try:
        with keep_sigterm():
            ray.init(**kwargs)
    except BaseException:
        ray.shutdown()
        raise


def terminate_local_ray(grace_s: float) -> None:
    """For a second Ctrl-C, which cannot wait for ``ray.shutdown``: SIGTERM every process of
    the Ray this process started (none when it joined or was embedded), the workers and agents
    its raylet started included, and SIGKILL what is left after ``grace_s``."""
    import ray

    node = getattr(ray._private.worker, "_global_node", None)  # no public API for this
    if node is None or not node.is_head():
        return
    # the whole tree, taken while it is whole: a raylet's agents outlive it by minutes
    pids = [pid for pid in ProcessTree(os.getpid()).scan() if pid != os.getpid()]
    for pid in pids:
        _kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in left:
        _kill(pid, signal.SIGKILL)


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:  # gone meanwhile
        pass
