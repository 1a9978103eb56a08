"""Collective bandwidth measurement on an initialised process group, nccl-tests style.

For each operation and size the buffer is timed over ``iters`` back-to-back calls after a
warm-up, and the slowest rank's time is reported (as nccl-tests does: a collective is only as
fast as its last rank). Bandwidths use nccl-tests' definitions, with ``size`` the full buffer::

    algbw = size / time        busbw = algbw * factor
    all_reduce: 2(n-1)/n       all_gather, reduce_scatter: (n-1)/n

busbw is comparable across rank counts and to the link's line rate. In the same run a plain
``torch.distributed.all_reduce`` loop timed around the loop on the local rank is measured as a
baseline, so a harness that distorted the numbers would show up as a ratio away from 1.

Runs in: bench actors / Train workers (every rank calls the same functions in the same order).
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.distributed as dist

from pipeline.collective.topology import Topology

logger = logging.getLogger(__name__)

OPS = ("all_reduce", "all_gather", "reduce_scatter")
_ELEMENT = 4  # float32
_AUTO_BYTES_PER_SIZE = 64 << 20  # auto iters: about this much traffic per size
# Fraction of a link's line rate below which the link is "far below its class".
_FAR_BELOW = 0.25
_NVLINK_FLOOR_GBPS = 10.0
_ROUNDS = 3  # alternating baseline/harness rounds for all-reduce

# torch >= 2.10 renamed the tensor variants; keep working on older torch too.
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def bus_factor(op: str, world: int) -> float:
    """nccl-tests' busbw / algbw factor for ``op`` on ``world`` ranks."""
    if op == "all_reduce":
        return 2 * (world - 1) / world
    if op in ("all_gather", "reduce_scatter"):
        return (world - 1) / world
    raise ValueError(f"unknown collective {op!r}; expected one of {', '.join(OPS)}")


def size_sweep(max_bytes: int, min_bytes: int = 1 << 10, step: int = 4) -> list[int]:
    """1 KiB, 4 KiB, ... up to ``max_bytes`` (nccl-tests' ``-b 1K -e MAX -f 4``)."""
    if max_bytes < min_bytes:
        raise ValueError(f"--max-size ({max_bytes}) must be >= {min_bytes} bytes")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= step
    return sizes


def auto_iters(size_bytes: int) -> int:
    return max(3, min(50, _AUTO_BYTES_PER_SIZE // max(size_bytes, 1)))


def measure_collectives(sizes_bytes: Sequence[int], ops: Sequence[str] = OPS,
                        iters: int | None = None, warmup: int = 2, *,
                        device: torch.device | str = "cpu") -> list[dict[str, Any]]:
    """One row per (op, size): time, algbw/busbw in GB/s, correctness, raw all-reduce baseline."""
    world = dist.get_world_size()
    device = torch.device(device)
    rows = []
    for op in ops:
        bus_factor(op, world)  # validates op before any rank starts a collective
    for size in sizes_bytes:
        count = max(world, size // _ELEMENT // world * world)
        nbytes = count * _ELEMENT
        n = iters if iters is not None else auto_iters(nbytes)
        for op in ops:
            correct = _check(op, count, world, device)
            run = _make(op, count, world, device)
            raw_time = None
            if op == "all_reduce":
                # Alternate baseline and harness and keep medians, so drift on a shared
                # machine (another job, CPU frequency) does not land on one side only.
                pairs = [(_raw_all_reduce_time(count, n, warmup, device),
                          _timed(run, n, warmup, device)) for _ in range(_ROUNDS)]
                raw_time = statistics.median(r for r, _ in pairs)
                seconds = statistics.median(t for _, t in pairs)
            else:
                seconds = _timed(run, n, warmup, device)
            algbw = nbytes / seconds / 1e9
            row = {"op": op, "size_bytes": nbytes, "count": count, "ranks": world, "iters": n,
                   "time_s": seconds, "algbw_GBps": algbw,
                   "busbw_GBps": algbw * bus_factor(op, world), "correct": correct,
                   "raw_time_s": raw_time, "raw_busbw_GBps": None}
            if raw_time is not None:
                row["raw_busbw_GBps"] = nbytes / raw_time / 1e9 * bus_factor(op, world)
            rows.append(row)
    return rows


def classify_link(busbw_GBps: float, backend: str, topology: Topology, *,
                  multi_node: bool = True) -> str | None:
    """A message when ``busbw_GBps`` is far below what the node's link class should give."""
    if not multi_node:
        if backend == "nccl" and topology.interconnect == "nvlink" and \
                busbw_GBps < _NVLINK_FLOOR_GBPS:
            return (f"busbw {busbw_GBps:.2f} GB/s inside a node with NVLink: NCCL is not using "
                    "NVLink peer-to-peer (NCCL_P2P_DISABLE set? PCIe ACS on?)")
        return None
    ports = topology.active_rdma_ports
    if ports:
        dev, port = max(ports, key=lambda dp: dp[1].rate_gbps or 0)
        line = (port.rate_gbps or 0) / 8
        where = f"{dev.name}:{port.port} ({port.kind}, {port.rate_gbps or '?'} Gb/s)"
        if backend == "gloo" and topology.gpus:
            return (f"gloo moves tensors over TCP sockets although RDMA {where} is present; "
                    "set collective.backend to nccl (or auto) on GPU workers")
        if backend == "nccl" and line and busbw_GBps < _FAR_BELOW * line:
            return (f"NCCL is on sockets, not RDMA: busbw {busbw_GBps:.2f} GB/s vs "
                    f"~{line:.1f} GB/s line rate of {where}; run with NCCL_DEBUG=INFO and "
                    "look for NET/IB, not NET/Socket; check NCCL_IB_DISABLE, NCCL_IB_HCA and "
                    "NCCL_IB_GID_INDEX")
        return None
    nics = [i for i in topology.interfaces or () if i.up and not i.virtual and i.speed_mbps]
    if not nics:
        return None
    nic = max(nics, key=lambda i: i.speed_mbps or 0)
    line = (nic.speed_mbps or 0) / 8000
    if busbw_GBps < _FAR_BELOW * line:
        return (f"busbw {busbw_GBps:.2f} GB/s is far below {nic.name}'s {nic.speed_mbps} Mb/s "
                f"(~{line:.2f} GB/s): check that NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME select "
                f"{nic.name} and not a slower or virtual interface")
    return None


# ----------------------------------------------------------------------------- helpers


def _make(op: str, count: int, world: int, device: torch.device) -> Callable[[], Any]:
    # Zeros keep values fixed across iterations (no overflow, no denormals) so time is stable.
    if op == "all_reduce":
        buf = torch.zeros(count, device=device)
        return lambda: dist.all_reduce(buf, async_op=True)
    if op == "all_gather":
        out = torch.zeros(count, device=device)
        chunk = torch.zeros(count // world, device=device)
        return lambda: _all_gather(out, chunk, async_op=True)
    src = torch.zeros(count, device=device)
    out = torch.zeros(count // world, device=device)
    return lambda: _reduce_scatter(out, src, async_op=True)


def _check(op: str, count: int, world: int, device: torch.device) -> bool:
    """Run ``op`` once on known values; True when every element is what the sum says."""
    rank = dist.get_rank()
    if op == "all_reduce":
        buf = torch.full((count,), float(rank + 1), device=device)
        dist.all_reduce(buf)
        want = torch.full_like(buf, world * (world + 1) / 2)
    elif op == "all_gather":
        buf = torch.empty(count, device=device)
        _all_gather(buf, torch.full((count // world,), float(rank), device=device))
        want = torch.arange(world, device=device, dtype=buf.dtype).repeat_interleave(count // world)
    else:
        src = torch.arange(world, device=device, dtype=torch.float32).repeat_interleave(
            count // world) + rank
        buf = torch.empty(count // world, device=device)
        _reduce_scatter(buf, src)
        want = torch.full_like(buf, world * rank + world * (world - 1) / 2)
    mine = torch.tensor([1 if torch.equal(buf, want) else 0], device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MIN)  # correct only if correct on every rank
    return bool(mine.item())


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timed(run: Callable[[], Any], iters: int, warmup: int, device: torch.device) -> float:
    for _ in range(warmup):
        run().wait()
    _sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        run().wait()
    _sync(device)
    mine = torch.tensor([(time.perf_counter() - start) / iters], dtype=torch.float64,
                        device=device)
    dist.all_reduce(mine, op=dist.ReduceOp.MAX)
    return float(mine.item())


def _raw_all_reduce_time(count: int, iters: int, warmup: int, device: torch.device) -> float:
    """The baseline a user would write: a blocking all_reduce loop timed on this rank."""
    buf = torch.zeros(count, device=device)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    _sync(device)
    return (time.perf_counter() - start) / iters
