"""Connecting the driver to Ray: join a cluster, reuse an embedding driver's Ray, or start one.

Order of precedence: ``--address``/``run.address``, then ``RAY_ADDRESS``, then a Ray the caller
already initialised (embedding: used and left running), else a local Ray sized from this
machine with the dashboard on 127.0.0.1 only, shut down when the run ends.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

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


@contextmanager
def ray_session(address: str | None = "", num_cpus: int = 0, *, dashboard: bool = True,
                log_to_driver: bool = False) -> Iterator[RaySession]:
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
        ray.init(address=address, log_to_driver=log_to_driver)
        mode = "joined"
    else:
        cpus = num_cpus or os.cpu_count() or 1
        # The dashboard serves Ray's state API (Ray Train polls it) and job submission; bind it
        # to loopback so a local run exposes nothing to the network.
        # address="local": never attach to another Ray that `ray start` left on this machine.
        ray.init(address="local", num_cpus=cpus, include_dashboard=dashboard,
                 dashboard_host="127.0.0.1", log_to_driver=log_to_driver)
        mode = "local"
    try:
        yield RaySession(ray.get_runtime_context().gcs_address, mode)
    finally:
        ray.shutdown()
