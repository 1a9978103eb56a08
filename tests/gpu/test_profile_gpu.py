"""The profiler on a real CUDA device: event spans time the GPU, NVTX ranges stay balanced, and
the timed comm hook on NCCL sees every bucket without changing the gradients. Skipped without
CUDA; no Ray."""

import copy
import socket
import sys
import time
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/gpu has no package init

from pipeline.profile import StepProfiler, timed_hook  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

# About 25 ms at the H200's top SM clock, longer when the clock is lower: far above launch cost.
SLEEP_CYCLES = 50_000_000


def test_cuda_spans_time_the_device_not_the_enqueue():
    device = torch.device("cuda", 0)
    torch.cuda._sleep(1000)  # load the kernel and the context before anything is timed
    torch.cuda.synchronize()
    prof = StepProfiler(rank=0, device=device)
    raw, host = [], []
    for _ in range(3):
        with prof.span("data_wait"):
            pass
        t0 = time.perf_counter()
        with prof.span("forward"):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(SLEEP_CYCLES)
            end.record()
        host.append(time.perf_counter() - t0)
        raw.append((start, end))
        with prof.span("backward"):
            pass
        prof.step_done(samples=1)
    summary = prof.epoch_summary()
    torch.cuda.synchronize()
    kernel = [a.elapsed_time(b) / 1000 for a, b in raw]
    # The kernel runs long after the host left the span, so a host clock would see ~0 here.
    assert max(host) < min(kernel) / 2, "the sleep kernel did not run asynchronously"
    forward = summary["phases"]["forward"]
    # The span's events bracket the raw events on the same stream: never shorter than the
    # kernel, and nothing else ran inside it.
    assert forward["sum"] >= 0.999 * sum(kernel)
    assert forward["sum"] <= 1.5 * sum(kernel) + 1e-3
    total = sum(v["sum"] for v in summary["phases"].values())
    assert total == pytest.approx(summary["wall_s"], rel=1e-6)
    assert summary["steps"] == 3


@pytest.mark.parametrize("nvtx", [True, False])
def test_nvtx_ranges_follow_the_spans_and_stay_balanced_when_a_span_raises(monkeypatch, nvtx):
    pushed, popped = [], []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: pushed.append(name))
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: popped.append(1))
    prof = StepProfiler(rank=0, device=torch.device("cuda", 0), nvtx=nvtx)
    with prof.span("data_wait"):
        pass
    with pytest.raises(RuntimeError, match="boom"), prof.span("forward"):
        raise RuntimeError("boom")
    with prof.span("backward"):
        torch.cuda._sleep(1000)
    prof.step_done(samples=1)
    prof.epoch_summary()
    if nvtx:
        assert pushed == ["data_wait", "forward", "backward"]
        assert len(popped) == len(pushed)
    else:
        assert pushed == [] and popped == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def nccl_group():
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("torch built without NCCL")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_timed_hook_on_nccl_sees_every_bucket_and_keeps_the_gradients(nccl_group):
    from pipeline.collective import CollectiveConfig, wrap_ddp

    device = torch.device("cuda", 0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 10)).to(device)
    reference = copy.deepcopy(model)
    prof = StepProfiler(rank=0, device=device)
    config = CollectiveConfig(backend="nccl", timeout_s=60, bucket_cap_mb=0.25)
    ddp = wrap_ddp(model, config, device=device,
                   hook_wrapper=lambda hook, state: timed_hook(hook, state, prof.comm_timer))
    steps = 4
    for step in range(steps):
        x = torch.randn(32, 64, device=device)
        y = torch.randint(0, 10, (32,), device=device)
        with prof.span("forward"):
            loss = torch.nn.functional.cross_entropy(ddp(x), y)
        with prof.span("backward"):
            loss.backward()
        prof.step_done(samples=len(x))
        torch.nn.functional.cross_entropy(reference(x), y).backward()
        for p, r in zip(model.parameters(), reference.parameters(), strict=True):
            torch.testing.assert_close(p.grad, r.grad, msg=f"step {step}: the hook changed a "
                                       "gradient (world size 1: all-reduce is the identity)")
            p.grad = None
            r.grad = None
    summary = prof.epoch_summary()
    # Every step hands at least one bucket to the hook (DDP regroups buckets after step 1).
    assert prof.comm_timer.buckets_seen >= steps
    phases = summary["phases"]
    assert sum(v["sum"] for v in phases.values()) == pytest.approx(summary["wall_s"], rel=1e-6)
