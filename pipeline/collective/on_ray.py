"""The Ray shell of the collective stage: detection on every node, the benchmark over actors.

Everything else in :mod:`pipeline.collective` runs without Ray (a torch-only GPU box, a plain
torchrun script); this module is the only one that talks to Ray, and it imports Ray inside its
functions so importing :mod:`pipeline.collective` never does. Detection runs as one task per
alive node, pinned with a hard ``NodeAffinitySchedulingStrategy`` and ``num_cpus=0`` so a busy
cluster still answers. The benchmark starts N actors that form a gloo or nccl process group
among themselves and run :func:`pipeline.collective.measure.measure_collectives`.

Runs in: driver.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.collective.config import CollectiveConfig
from pipeline.collective.topology import Topology, detect_topology

logger = logging.getLogger(__name__)

_DETECT_TIMEOUT_S = 120.0
_ACTOR_START_TIMEOUT_S = 180.0


def ray_in_use(address: str | None) -> bool:
    """Whether a command should work on a cluster rather than on this machine alone."""
    if address or os.environ.get("RAY_ADDRESS"):
        return True
    try:
        import ray
    except ImportError:  # a node checked before Ray is installed (pipeline doctor)
        return False
    return ray.is_initialized()


def detect_on_nodes(root: str | Path = "/", *,
                    timeout_s: float = _DETECT_TIMEOUT_S) -> list[Topology]:
    """:func:`detect_topology` on every alive node: in this process for the driver's own node
    (no worker process to start and no torch import to wait for), one pinned task for each
    other node."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0, max_retries=0)(detect_topology)
    here = ray.get_runtime_context().get_node_id()
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != here]
    refs = [remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=n["NodeID"], soft=False)).remote(str(root)) for n in nodes]
    local = detect_topology(root)
    ready, pending = ray.wait(refs, num_returns=len(refs), timeout=timeout_s) if refs else ([], [])
    if pending:
        missing = [n["NodeManagerHostname"]
                   for n, r in zip(nodes, refs, strict=True) if r in pending]
        raise TimeoutError(f"topology detection did not finish within {timeout_s:g} s on "
                           f"{', '.join(missing)}; are those nodes overloaded or unreachable?")
    return [local, *ray.get(refs)]


@dataclass(frozen=True, kw_only=True)
class BenchRun:
    """Rows from rank 0, the backend used, where the ranks ran and rank 0's topology."""

    backend: str
    backend_reason: str
    workers: int
    nodes: int
    rows: list[dict[str, Any]]
    topology: Topology


class _BenchWorker:
    """One rank of the benchmark (a Ray actor; made remote lazily by :func:`run_bench`)."""

    def where(self) -> tuple[str, int, str]:
        import ray

        with socket.socket() as sock:  # a free port for the rendezvous, if this is rank 0
            sock.bind(("", 0))
            port = sock.getsockname()[1]
        return ray.util.get_node_ip_address(), port, ray.get_runtime_context().get_node_id()

    def setup(self, config: CollectiveConfig, rank: int, world: int, init_method: str,
              has_gpu: bool) -> tuple[str, str]:
        from pipeline.collective.process_group import init_process_group  # torch: actor only

        self.device = "cuda:0" if has_gpu and config.backend != "gloo" else "cpu"
        return init_process_group(config, rank=rank, world_size=world, init_method=init_method,
                                  has_gpu=has_gpu)

    def measure(self, sizes: Sequence[int], ops: Sequence[str], iters: int | None,
                warmup: int) -> list[dict[str, Any]]:
        from pipeline.collective.measure import measure_collectives

        return measure_collectives(sizes, ops, iters, warmup, device=self.device)

    def topology(self) -> Topology:
        return detect_topology()

    def close(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


def run_bench(workers: int, config: CollectiveConfig, sizes: Sequence[int], *,
              ops: Sequence[str] | None = None, iters: int | None = None, warmup: int = 2,
              timeout_s: float = 1800.0) -> BenchRun:
    """Measure collectives across ``workers`` Ray actors that form one process group (``ops``:
    by default every one :func:`~pipeline.collective.measure.measure_collectives` knows)."""
    import ray

    from pipeline.collective.measure import OPS

    ops = OPS if ops is None else ops

    if workers < 2:
        raise ValueError(f"--workers ({workers}) must be >= 2: a collective needs two ranks")
    has_gpu = config.backend != "gloo" and ray.cluster_resources().get("GPU", 0) >= workers
    actor_cls = ray.remote(num_cpus=1, num_gpus=1 if has_gpu else 0)(_BenchWorker)
    actors = [actor_cls.remote() for _ in range(workers)]
    try:
        places = ray.get([a.where.remote() for a in actors], timeout=_ACTOR_START_TIMEOUT_S)
        ip, port, _ = places[0]
        init = f"tcp://{ip}:{port}"
        setups = ray.get([a.setup.remote(config, r, workers, init, has_gpu)
                          for r, a in enumerate(actors)], timeout=config.timeout_s + 60)
        backend, reason = setups[0]
        results = ray.get([a.measure.remote(list(sizes), list(ops), iters, warmup)
                           for a in actors], timeout=timeout_s)
        topology = ray.get(actors[0].topology.remote(), timeout=_DETECT_TIMEOUT_S)
        ray.get([a.close.remote() for a in actors], timeout=60)
    finally:
        for actor in actors:
            ray.kill(actor)
    return BenchRun(backend=backend, backend_reason=reason, workers=workers,
                    nodes=len({node for _, _, node in places}), rows=results[0],
                    topology=topology)
