"""Advice per local rank: each Train worker's own rail first, and CPUs near its GPU.

The node's advice (:func:`~pipeline.collective.advice.advise`) is the same for every rank on a
node; the plan here is what differs between them. Ray gives each Train worker one GPU (its
``CUDA_VISIBLE_DEVICES``, indexed by the worker's torch device), so the worker knows its
physical GPU, and from the pairing its rail:

- ``NCCL_IB_HCA`` lists the node's compute rails with the rank's own rail first, then the rails
  nearest its GPU. NCCL pairs GPUs with NICs by PCI distance itself when it sees the whole
  node; the ordering keeps a rank that sees less (one visible GPU, a restricted container) from
  starting all eight ranks on ``mlx5_0``, and it names the rail the doctor shows.
- its data threads (Ray Data iteration, the transfer stage's copy threads) run on the CPUs of
  its GPU's NUMA node: the host side of every H2D copy stays on the socket the GPU hangs off.

:func:`plan_ranks` and :func:`plan_rank` are pure; :func:`apply_rank_plan` is the thin shell a
Train worker calls before its first NCCL collective (torch creates NCCL communicators lazily, at
the first collective, which is when NCCL reads its environment). Nothing here imports Ray.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.collective._pci import LEVELS, parse_cpulist
from pipeline.collective.advice import Advice
from pipeline.collective.rails import natural, pair_rails
from pipeline.collective.topology import Topology

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class RankPlan:
    """What one local rank (one GPU) is given on top of its node's advice. Picklable."""

    local_rank: int
    gpu: int
    rail: str | None
    """``mlx5_0:1``: the port of the GPU's own rail that NCCL is given first."""
    distance: str | None
    cpus: str | None
    """CPU list local to the GPU (``0-55,112-167``), for the rank's data threads."""
    numa_node: int | None
    env: dict[str, str] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"local_rank": self.local_rank, "gpu": self.gpu, "rail": self.rail,
                "distance": self.distance, "cpus": self.cpus, "numa_node": self.numa_node,
                "env": dict(self.env)}


def plan_ranks(topology: Topology, advice: Advice) -> tuple[RankPlan, ...]:
    """One plan per GPU of the node, local rank ``i`` on the ``i``-th GPU (as torchrun and Ray
    Train order them when every GPU of the node is in use)."""
    return tuple(plan_rank(topology, advice, gpu.index, local_rank=i)
                 for i, gpu in enumerate(sorted(topology.gpus, key=lambda g: g.index)))


def plan_rank(topology: Topology, advice: Advice, gpu: int, *, local_rank: int) -> RankPlan:
    """The plan for the rank that drives physical GPU ``gpu``."""
    found = next((g for g in topology.gpus if g.index == gpu), None)
    if found is None:
        raise ValueError(f"GPU {gpu} is not on {topology.hostname} (it has "
                         f"{[g.index for g in topology.gpus]})")
    rails = pair_rails(topology)
    pair = rails.rail_of(gpu)
    ports = list(advice.hca_ports)
    distance = {n: LEVELS.index(d) for n, d in found.nic_distance.items() if d in LEVELS}
    own = pair.rail if pair else None

    def key(port: str) -> tuple:
        device = port.split(":")[0]
        return (device != own, distance.get(device, len(LEVELS)), natural(port))

    ordered = sorted(ports, key=key)
    env, reasons = {}, {}
    first = ordered[0] if ordered else None
    if "NCCL_IB_HCA" in advice.env and ordered:
        env["NCCL_IB_HCA"] = "=" + ",".join(ordered)
        why = (f"GPU {gpu}'s own rail {first} ({pair.distance}) first" if own and
               first.split(":")[0] == own else
               f"GPU {gpu} has no usable rail of its own; the nearest one, {first}, first")
        reasons["NCCL_IB_HCA"] = why + ", then the others by distance from it"
    return RankPlan(local_rank=local_rank, gpu=gpu,
                    rail=first if own and first and first.split(":")[0] == own else None,
                    distance=pair.distance if pair else None, cpus=found.cpu_affinity,
                    numa_node=found.numa_node, env=env, reasons=reasons)


def worker_gpu(visible: str | None, device_index: int | None) -> int | None:
    """Physical GPU index of a worker: entry ``device_index`` of ``CUDA_VISIBLE_DEVICES``.

    Unset means every GPU is visible in physical order. Entries that are UUIDs (``GPU-…``) or
    MIG instances cannot be mapped without NVML, so they give None.
    """
    if device_index is None:
        return None
    if visible is None:
        return device_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device_index >= len(entries) or not entries[device_index].isdigit():
        return None
    return int(entries[device_index])


def select_plan(plans: Mapping[str, Sequence[Mapping[str, Any]]], hostname: str,
                gpu: int | None) -> Mapping[str, Any] | None:
    """The recorded plan (``RankPlan.as_dict``) for ``gpu`` on ``hostname``, if there is one."""
    if gpu is None:
        return None
    return next((p for p in plans.get(hostname, ()) if p["gpu"] == gpu), None)


def apply_rank_plan(plans: Mapping[str, Sequence[Mapping[str, Any]]] | None, *,
                    device_index: int | None, environ: MutableMapping[str, str] | None = None,
                    hostname: str | None = None, pin_cpus: bool = True) -> dict[str, Any] | None:
    """Set this worker's rank env and CPU affinity from the driver's per-node plans.

    Call it in the Train worker before the first collective. ``plans`` maps hostname to the
    ``RankPlan.as_dict()`` of each GPU. The affinity applies to the calling thread and to the
    threads it starts afterwards (data iteration, copy threads), and only within the CPUs the
    process is already allowed. Returns what was applied (for the run summary), or None.
    """
    environ = os.environ if environ is None else environ
    hostname = hostname or socket.gethostname()
    gpu = worker_gpu(environ.get("CUDA_VISIBLE_DEVICES"), device_index)
    plan = select_plan(plans or {}, hostname, gpu)
    if plan is None:
        logger.info("no per-rank NCCL plan for GPU %s on %s", gpu, hostname)
        return None
    for key, value in plan["env"].items():
        environ[key] = value
    applied = {"host": hostname, "gpu": gpu, "rail": plan["rail"], "env": dict(plan["env"]),
               "cpus": None}
    if pin_cpus and plan.get("cpus") and hasattr(os, "sched_setaffinity"):
        wanted = parse_cpulist(plan["cpus"]) & os.sched_getaffinity(0)
        if wanted:
            os.sched_setaffinity(0, wanted)
            applied["cpus"] = plan["cpus"]
        else:
            logger.info("GPU %s's CPUs %s are outside this process's affinity; not pinned",
                        gpu, plan["cpus"])
    logger.info("rank plan on %s: %s", hostname, applied)
    return applied
