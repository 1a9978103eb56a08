"""Exposed all-reduce from DDP comm-hook futures, in a real 2-process gloo DDP run (no Ray)."""

import json
import socket
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel as DDP

from pipeline.profile import ProfileConfig, StepProfiler, diagnose, merge_ranks, timed_hook

STEPS = 6
SLOW_RANK = 1
SLOW_FORWARD_S = 0.08


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world, timeout=timedelta(seconds=60))
    try:
        model = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 256), torch.nn.ReLU(),
                                    torch.nn.Linear(256, 4))
        # Tiny buckets so one backward produces several (the method looks at the last one).
        ddp = DDP(model, bucket_cap_mb=0.05)
        prof = StepProfiler(rank=rank, device=torch.device("cpu"))
        hook, state = timed_hook(None, None, prof.comm_timer)
        ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        gen = torch.Generator().manual_seed(rank)
        for _ in range(STEPS):
            with prof.span("data_wait"):
                x, y = torch.randn(16, 32, generator=gen), torch.randint(0, 4, (16,), generator=gen)
            with prof.span("forward"):
                if rank == SLOW_RANK:
                    time.sleep(SLOW_FORWARD_S)  # in the spawned rank: a real slow rank
                loss = torch.nn.functional.cross_entropy(ddp(x), y)
            with prof.span("backward"):
                loss.backward()
            with prof.span("optimizer"):
                opt.step()
                opt.zero_grad()
            prof.step_done(samples=16)
        result = {"summary": prof.epoch_summary(), "buckets": prof.comm_timer.buckets_seen,
                  "params": [p.detach().sum().item() for p in model.parameters()]}
        with open(f"{out_dir}/rank{rank}.json", "w") as f:
            json.dump(result, f)
        # Both ranks are done with the group before either tears it down: rank 0 hosts the
        # store, and a rank whose peer exited with the gloo group alive can abort ("terminate
        # called without an active exception"). On an error, no barrier: the peer may never come.
        dist.barrier()
    finally:
        dist.destroy_process_group()


@pytest.fixture(scope="module")
def ddp_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("ddp")
    mp.spawn(_worker, args=(2, _free_port(), str(out)), nprocs=2, join=True)
    return {r: json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)}


@pytest.mark.timeout(120)
def test_wrapped_hook_still_averages_gradients(ddp_results):
    # Different data on each rank, identical parameters after training: the all-reduce ran.
    assert ddp_results[0]["params"] == pytest.approx(ddp_results[1]["params"], rel=1e-6)
    # DDP starts with one big first bucket and rebuilds smaller ones after step 1: more
    # buckets than steps means the timer saw the several buckets of a backward.
    assert ddp_results[0]["buckets"] > STEPS


@pytest.mark.timeout(120)
def test_fast_rank_waits_for_the_slow_one_in_exposed_comm(ddp_results):
    fast = ddp_results[0]["summary"]["phases"]
    slow = ddp_results[1]["summary"]["phases"]
    # The fast rank's last bucket is ready early and completes only once the slow rank's
    # gradients arrive: most of the slow rank's extra forward shows up as exposed comm there.
    assert fast["comm_exposed"]["p50"] > slow["comm_exposed"]["p50"]
    assert fast["comm_exposed"]["p50"] > SLOW_FORWARD_S / 2
    # comm_exposed is carved out of backward: the breakdown still adds up to the wall.
    s = ddp_results[0]["summary"]
    assert sum(p["sum"] for p in s["phases"].values()) == pytest.approx(s["wall_s"], rel=1e-9)


@pytest.mark.timeout(120)
def test_slow_rank_is_diagnosed_as_the_straggler(ddp_results):
    merged = merge_ranks({r: res["summary"] for r, res in ddp_results.items()})
    d = diagnose(merged, [], ProfileConfig(), {"train.num_workers": 2})
    assert d.verdict == "straggler"
    assert d.evidence["rank"] == SLOW_RANK and d.evidence["cause_phase"] == "forward"


def test_exposed_is_last_done_minus_last_ready():
    # imported here: the spawned ranks import this module and need none of the fake worker
    from pipeline.profile import CommTimer
    from tests.unit.train.fake_worker import VirtualClock

    clock = VirtualClock()
    timer = CommTimer(device=torch.device("cpu"), clock=clock)
    timer.on_ready()
    clock.advance(0.005)
    timer.on_done()  # an early bucket, reduced while backward still ran
    clock.advance(0.01)
    timer.on_ready()  # the last bucket: backward compute is over
    clock.advance(0.02)
    timer.on_done()
    # from the last ready (0.02), not the first (0.035); the early bucket's done is no later
    assert timer.step_exposed() == pytest.approx(0.02)
    assert timer.step_exposed() == 0.0  # a step without buckets (e.g. under no_sync)


def test_timed_hook_rejects_a_non_hook():
    from pipeline.profile import CommTimer

    with pytest.raises(TypeError, match="None for the default all-reduce"):
        timed_hook(42, None, CommTimer(device=torch.device("cpu")))
