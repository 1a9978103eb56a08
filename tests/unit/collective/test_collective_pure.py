"""Backend choice, bus-bandwidth arithmetic, link classification and the straggler view."""

from pathlib import Path

import pytest

from pipeline.collective import (
    CollectiveConfig,
    choose_backend,
    classify_link,
    detect_topology,
    straggler_summary,
)
from pipeline.collective.measure import bus_factor, size_sweep

FIXTURES = Path(__file__).parent / "fixtures"


def test_auto_backend_follows_the_hardware():
    assert choose_backend(CollectiveConfig(), has_gpu=True)[0] == "nccl"
    assert choose_backend(CollectiveConfig(), has_gpu=False)[0] == "gloo"
    backend, reason = choose_backend(CollectiveConfig(backend="gloo"), has_gpu=True)
    assert backend == "gloo" and "set in config" in reason


def test_nccl_without_gpu_names_the_field_and_remedy():
    with pytest.raises(ValueError, match=r"collective.backend \('nccl'\) needs CUDA GPUs.*'gloo'"):
        choose_backend(CollectiveConfig(backend="nccl"), has_gpu=False)


def test_bus_factors_follow_nccl_tests():
    assert bus_factor("all_reduce", 8) == pytest.approx(1.75)
    assert bus_factor("all_gather", 8) == pytest.approx(0.875)
    assert bus_factor("reduce_scatter", 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        bus_factor("broadcast", 2)


def test_size_sweep_covers_1k_to_256m():
    sizes = size_sweep(256 << 20)
    assert sizes[0] == 1024 and sizes[-1] == 256 << 20 and len(sizes) == 10


def test_nccl_far_below_infiniband_is_flagged_as_sockets():
    topo = detect_topology(FIXTURES / "ib_gdr")
    message = classify_link(1.1, "nccl", topo)
    assert message.startswith("NCCL is on sockets, not RDMA: busbw 1.10 GB/s vs ~25.0 GB/s")
    assert classify_link(20.0, "nccl", topo) is None
    assert "gloo moves tensors over TCP" in classify_link(1.1, "gloo", topo)


def test_socket_link_far_below_nic_speed_is_flagged():
    topo = detect_topology(FIXTURES / "no_rdma")  # 10 Gb/s eth0
    assert "far below eth0's 10000 Mb/s" in classify_link(0.1, "gloo", topo)
    assert classify_link(1.0, "gloo", topo) is None
    assert classify_link(0.1, "gloo", topo, multi_node=False) is None


def test_straggler_summary_names_the_slowest_rank():
    summary = straggler_summary({0: 1.0, 1: 1.02, 2: 1.6, 3: 0.98})
    assert summary["slowest_rank"] == 2 and summary["fastest_rank"] == 3
    assert summary["imbalance"] == pytest.approx(1.6 / 1.0)  # vs the other ranks' median
    assert summary["straggler"] and "rank 2 is a straggler" in summary["message"]


def test_balanced_ranks_are_not_stragglers():
    summary = straggler_summary({0: 1.0, 1: 1.1})
    assert not summary["straggler"] and summary["message"] == ""


def test_straggler_summary_rejects_empty_or_non_positive_times():
    with pytest.raises(ValueError, match="at least one rank"):
        straggler_summary({})
    with pytest.raises(ValueError, match="must be > 0"):
        straggler_summary({0: 0.0})
