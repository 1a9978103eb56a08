"""DeviceFeeder on a real CUDA device: the shared iterator contract, stream-ordering races,
pinning and the allocator's steady state. Skipped without CUDA."""

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/gpu has no package init

from pipeline.transfer import DeviceFeeder  # noqa: E402
from tests.unit.iterator_contract import IteratorContract  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

# cudaStreamPerThread: the per-thread default stream's handle in the CUDA runtime API.
_PER_THREAD_DEFAULT_STREAM = 0x2


def _on_device(value):
    if isinstance(value, torch.Tensor):
        assert value.device.type == "cuda", f"a batch tensor stayed on {value.device}"
        return value.cpu().numpy()
    return value


class TestDeviceFeederCudaContract(IteratorContract):
    where_hint = "raised in the producer thread while reading batch 3 from the source"

    def build(self, source):
        return DeviceFeeder(source, device="cuda", depth=2, min_pin_bytes=0)

    def to_host(self, value):
        return _on_device(value)


class TestDeviceFeederCudaPageableContract(IteratorContract):
    where_hint = "feedline-transfer"

    def build(self, source):
        return DeviceFeeder(source, device="cuda", depth=1, pin_memory=False)

    def to_host(self, value):
        return _on_device(value)


def _consumer_stream(kind):
    if kind == "per_thread_default":
        return torch.cuda.ExternalStream(_PER_THREAD_DEFAULT_STREAM)
    if kind == "legacy_default":
        return torch.cuda.default_stream()
    return torch.cuda.Stream()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sleep_first", [True, False], ids=["slow_consumer", "eager_consumer"])
@pytest.mark.parametrize("kind", ["per_thread_default", "legacy_default", "side_stream"])
def test_consumer_stream_never_sees_a_slot_overwritten(kind, sleep_first):
    # Each batch is 4 MiB filled with its index. The consumer queues its read behind a GPU
    # spin (slow) or right away (eager) and drops the batch at once, so a missing record_stream
    # lets the copy stream reuse the memory under the pending read, and a missing wait_event
    # lets the read run before the copy: either shows up as a wrong min/max.
    n, numel = 48, 1 << 20
    source = ({"x": np.full(numel, i, dtype=np.float32)} for i in range(n))
    stream = _consumer_stream(kind)
    lows, highs = [], []
    with torch.cuda.stream(stream):
        for batch in DeviceFeeder(source, device="cuda", depth=1, pin_memory=True):
            if sleep_first:
                torch.cuda._sleep(2_000_000)
            lows.append(batch["x"].min())
            highs.append(batch["x"].max())
            del batch
        got = torch.stack(lows + highs).cpu()  # ordered on the consumer stream
    expected = torch.arange(n, dtype=torch.float32).repeat(2)
    assert torch.equal(got, expected), f"consumer on {kind} saw foreign data: {got.tolist()}"


def test_held_batches_survive_slot_reuse_on_device():
    n = 24
    source = ({"x": np.full((256, 1024), i, dtype=np.float32)} for i in range(n))
    held = list(DeviceFeeder(source, device="cuda", depth=2, min_pin_bytes=0))
    assert [int(b["x"].min()) for b in held] == list(range(n))
    assert [int(b["x"].max()) for b in held] == list(range(n))


def test_pinning_follows_batch_size_and_is_recorded():
    big = DeviceFeeder([{"x": np.zeros(2 << 20, np.uint8)}], device="cuda")
    list(big)
    assert big.stats.pinned and "pinned: cuda and batch (2.0 MiB)" in big.stats.pin_reason
    small = DeviceFeeder([{"x": np.zeros(1024, np.uint8)}], device="cuda")
    list(small)
    assert not small.stats.pinned and "< min_pin_bytes" in small.stats.pin_reason
    assert small.stats.device.startswith("cuda: ")


@pytest.mark.timeout(120)
def test_steady_state_makes_no_host_or_device_allocations():
    def batches(n):
        return ({"x": np.full((64, 1024), i, np.float32), "y": np.arange(64)} for i in range(n))

    # Warm the caching allocator first, then count cudaMalloc segments over 1,000 batches.
    for _ in DeviceFeeder(batches(50), device="cuda", depth=2, min_pin_bytes=0):
        pass
    torch.cuda.synchronize()
    segments = torch.cuda.memory_stats()["segment.all.allocated"]
    feeder = DeviceFeeder(batches(1000), device="cuda", depth=2, min_pin_bytes=0)
    for batch in feeder:  # keeps no reference beyond the current batch
        batch["x"].add_(1)
    torch.cuda.synchronize()
    stats = feeder.stats
    assert stats.pool_allocations == 2 * 3 and stats.pool_grows == 0
    assert stats.host_copies == 2000 and stats.batches == 1000
    assert torch.cuda.memory_stats()["segment.all.allocated"] == segments, "new cudaMalloc"


def test_uint8_normalize_on_device_matches_the_formula_and_the_cpu():
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    rng = np.random.default_rng(1)
    images = [rng.integers(0, 256, (4, 3, 16, 16), dtype=np.uint8) for _ in range(3)]
    spec = {"image": (mean, std)}
    gpu = list(DeviceFeeder(({"image": im} for im in images), device="cuda",
                            uint8_normalize=spec))
    cpu = list(DeviceFeeder(({"image": im} for im in images), device="cpu",
                            uint8_normalize=spec))
    m = torch.tensor(mean, device="cuda").view(1, 3, 1, 1)
    s = torch.tensor(std, device="cuda").view(1, 3, 1, 1)
    for im, g, c in zip(images, gpu, cpu, strict=True):
        reference = (torch.from_numpy(im).cuda().float() / 255 - m) / s
        assert torch.equal(g["image"], reference)
        torch.testing.assert_close(g["image"].cpu(), c["image"], rtol=0, atol=1e-6)
