"""The H2D benchmark's methods on a real CUDA device deliver exactly the source bytes, also when
the consumer keeps every batch and its stream runs behind (so a baseline that reuses a pinned
buffer too early, or frees one under a pending copy, fails here rather than looking fast).
Skipped without CUDA; no Ray."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "h2d.py"


def _load_h2d():
    spec = importlib.util.spec_from_file_location("feedline_bench_h2d", _PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


h2d = _load_h2d()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("method", list(h2d.METHODS))
def test_every_h2d_method_delivers_the_source_bytes(method):
    device = torch.device("cuda", 0)
    rng = np.random.default_rng(7)
    # 1 MiB float32 batches, each distinct; the pool pins at this size (min_pin_bytes).
    arrays = [rng.random(1 << 18, dtype=np.float32) + i for i in range(16)]
    held = []
    for x in h2d.METHODS[method](arrays, device):
        torch.cuda._sleep(2_000_000)  # the consumer's stream lags the producer
        held.append(x)
    torch.cuda.synchronize()
    assert len(held) == len(arrays)
    for i, (a, x) in enumerate(zip(arrays, held, strict=True)):
        assert x.device.type == "cuda"
        assert torch.equal(x.cpu(), torch.from_numpy(a)), f"{method}: batch {i} is wrong"
