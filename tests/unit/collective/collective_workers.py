"""Rank functions for the 2-process gloo tests (spawned, so they live in an importable module).

Each function runs in a fresh process started by ``torch.multiprocessing.spawn``, joins a gloo
group on 127.0.0.1 and writes what it observed to ``<out>/rank<r>.json`` for the test to read.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from pipeline.collective import (
    CollectiveConfig,
    CollectiveTimeoutError,
    init_process_group,
    measure_collectives,
    wrap_ddp,
)

HOOKS = ("none", "fp16", "bf16", "powersgd", "none+wrapper")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def spawn(fn, out: Path, *extra) -> list[dict]:
    """Run ``fn(rank, port, out, *extra)`` on 2 ranks; return each rank's JSON report."""
    mp.spawn(fn, args=(free_port(), str(out), *extra), nprocs=2, join=True)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


def _join(rank: int, port: int, config: CollectiveConfig) -> None:
    torch.set_num_threads(1)  # two ranks share two cores
    init_process_group(config, rank=rank, world_size=2, init_method=f"tcp://127.0.0.1:{port}",
                       has_gpu=False)


def _report(out: str, rank: int, data: dict) -> None:
    Path(out, f"rank{rank}.json").write_text(json.dumps(data))


def _digits(rank: int):
    """Digits, standardised; each rank trains on its half of the training split."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    x = torch.tensor(x / 16.0, dtype=torch.float32)
    y = torch.tensor(y)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    x, y = x[perm], y[perm]
    cut = int(0.8 * len(x))
    return x[:cut][rank::2], y[:cut][rank::2], x[cut:], y[cut:]


def train_with_hooks(rank: int, port: int, out: str) -> None:
    _join(rank, port, CollectiveConfig(backend="gloo", timeout_s=60))
    xtr, ytr, xte, yte = _digits(rank)
    report = {}
    for name in HOOKS:
        calls = []

        def wrapper(hook, state, calls=calls):
            def timed(state_, bucket):
                calls.append(bucket.index())
                return hook(state_, bucket)
            return timed, state

        hook = name.split("+")[0]
        config = CollectiveConfig(backend="gloo", timeout_s=60, comm_hook=hook,
                                  bucket_cap_mb=0.01, powersgd_rank=2, powersgd_start_iter=3)
        torch.manual_seed(rank)  # different on purpose: DDP must broadcast rank 0's weights
        model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                    torch.nn.Linear(64, 10))
        ddp = wrap_ddp(model, config, device="cpu",
                       hook_wrapper=wrapper if "wrapper" in name else None)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        gen = torch.Generator().manual_seed(1)
        for _ in range(8):
            order = torch.randperm(len(xtr), generator=gen)
            for i in range(0, len(order) - 31, 32):
                idx = order[i:i + 32]
                opt.zero_grad()
                torch.nn.functional.cross_entropy(ddp(xtr[idx]), ytr[idx]).backward()
                opt.step()
        with torch.no_grad():
            acc = (ddp.module(xte).argmax(1) == yte).float().mean().item()
            first = next(ddp.module.parameters()).detach().flatten()[:8].tolist()
        report[name] = {"accuracy": acc, "hook_calls": len(calls), "weights": first}
    _report(out, rank, report)
    dist.destroy_process_group()


def peer_never_joins(rank: int, port: int, out: str, timeout_s: float, released) -> None:
    config = CollectiveConfig(backend="gloo", timeout_s=timeout_s)
    _join(rank, port, config)
    if rank == 1:
        # Joined the group, then never takes part in a collective (a hung data loader, say).
        released.wait(timeout=120)
        _report(out, rank, {})
        os._exit(0)  # skip process-group teardown: the peer is gone
    start = time.monotonic()
    try:
        ddp = wrap_ddp(torch.nn.Linear(4, 2), config, device="cpu")
        ddp(torch.ones(2, 4)).sum().backward()
        result = {"error": None}
    except CollectiveTimeoutError as exc:
        result = {"error": str(exc), "type": type(exc).__name__}
    result["elapsed_s"] = time.monotonic() - start
    _report(out, rank, result)
    released.set()
    os._exit(0)


def bench(rank: int, port: int, out: str) -> None:
    _join(rank, port, CollectiveConfig(backend="gloo", timeout_s=60))
    rows = measure_collectives([1 << 10, 1 << 16], iters=3, warmup=1)
    _report(out, rank, {"rows": rows})
    dist.destroy_process_group()
