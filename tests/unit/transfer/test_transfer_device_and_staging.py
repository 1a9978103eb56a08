"""Device detection and the staging pool's sizing and pinning decisions (pure, CPU)."""

import subprocess
import sys
import threading

import pytest
import torch

from pipeline.transfer import DeviceChoice, detect_device
from pipeline.transfer.staging import StagingPool, decide_pinning, format_bytes
from pipeline.transfer.stats import TransferStats

needs_no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="machine has CUDA")


@needs_no_cuda
def test_auto_picks_cpu_and_says_why():
    choice = detect_device()
    assert choice == DeviceChoice(torch.device("cpu"), choice.reason)
    assert choice.reason.startswith("cpu: ") and "CUDA" in choice.reason


def test_explicit_cpu_device_objects_and_choices_are_accepted():
    assert detect_device(torch.device("cpu")).device == torch.device("cpu")
    choice = detect_device("cpu")
    assert detect_device(choice) is choice


@needs_no_cuda
def test_cuda_requested_without_cuda_is_an_error_with_a_remedy():
    with pytest.raises(RuntimeError, match="requested but .*use device='auto'"):
        detect_device("cuda:0")


@pytest.mark.parametrize(("prefer", "text"), [
    ("mps", "not supported by the transfer stage"),
    ("gpu please", "not a device name"),
])
def test_unsupported_devices_are_refused(prefer, text):
    with pytest.raises(ValueError, match=text):
        detect_device(prefer)


@pytest.mark.parametrize(("pin", "device", "nbytes", "pinned", "text"), [
    ("auto", "cuda", 8 << 20, True, "pinned: cuda and batch (8.0 MiB) >= min_pin_bytes"),
    ("auto", "cuda", 64 << 10, False, "batch (64.0 KiB) < min_pin_bytes (1.0 MiB)"),
    (True, "cuda", 10, True, "pin_memory=true"),
    (False, "cuda", 8 << 20, False, "pin_memory=false"),
    (True, "cpu", 8 << 20, False, "page-locking needs CUDA (pin_memory=true has no effect"),
    ("auto", "cpu", 8 << 20, False, "device is cpu"),
])
def test_pinning_decision_and_reason(pin, device, nbytes, pinned, text):
    got, reason = decide_pinning(pin, device, nbytes, 1 << 20)
    assert got is pinned and text in reason


def test_format_bytes():
    assert [format_bytes(n) for n in (5, 1536, 3 << 20, 5 << 30)] == [
        "5 B", "1.5 KiB", "3.0 MiB", "5.0 GiB"]


def _pool(size=2, device_type="cpu"):
    stats = TransferStats()
    allocated = []

    def allocate(nbytes, pinned):
        allocated.append((nbytes, pinned))
        return torch.empty(nbytes, dtype=torch.uint8)

    pool = StagingPool(size, allocate=allocate, pin_memory="auto", device_type=device_type,
                       min_pin_bytes=1 << 20, stats=stats, lock=threading.Lock())
    return pool, stats, allocated


def test_pool_reuses_a_buffer_across_dtypes_and_grows_only_when_needed():
    pool, stats, allocated = _pool()
    slot = pool.slots[0]
    a = pool.view(slot, "x", torch.float32, (10, 10), 400).tensor
    b = pool.view(slot, "x", torch.float64, (5, 10), 400)  # same bytes, other dtype
    assert a.data_ptr() == b.tensor.data_ptr() == b.array.ctypes.data
    assert b.tensor.shape == b.array.shape == (5, 10) and b.tensor.dtype == torch.float64
    assert pool.view(slot, "x", torch.float64, (5, 10), 400) is b  # the same shape: kept
    assert stats.pool_allocations == 1 and stats.pool_grows == 0
    c = pool.view(slot, "x", torch.uint8, (5000,), 5000).tensor
    assert c.numel() == 5000 and stats.pool_grows == 1 and stats.pool_allocations == 2
    assert pool.view(slot, "y", torch.bfloat16, (4,), 5008).array is None  # numpy lacks it
    assert stats.pool_bytes == 12288 and [n for n, _ in allocated] == [4096, 8192, 4096]
    pool.release()
    assert stats.pool_bytes == 0 and not slot.buffers


def test_pool_pins_large_batches_on_cuda_only_and_records_why():
    pool, stats, allocated = _pool(device_type="cuda")
    pool.view(pool.slots[0], "small", torch.uint8, (100,), 100)
    assert allocated[-1] == (4096, False) and "< min_pin_bytes" in stats.pin_reason
    pool.view(pool.slots[1], "big", torch.uint8, (2 << 20,), 2 << 20)
    assert allocated[-1] == (2 << 20, True) and stats.pinned


@pytest.mark.timeout(60)
def test_transfer_runs_without_ray():
    # The stage must work on a GPU box that has torch only: importing and iterating it must
    # not pull Ray in, and nothing may probe CUDA at import time.
    code = (
        "import sys, numpy as np\n"
        "sys.modules['ray'] = None  # any 'import ray' now raises ImportError\n"
        "import pipeline.transfer as t\n"
        "assert not any(m.startswith('ray') and sys.modules[m] for m in sys.modules)\n"
        "out = list(t.DeviceFeeder([{'x': np.ones(3)}], device='cpu'))\n"
        "assert float(out[0]['x'].sum()) == 3.0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
