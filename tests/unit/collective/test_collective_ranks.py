"""Advice per local rank: own rail first, CPUs of the GPU's NUMA node, applied in the worker."""

import os
from pathlib import Path

import pytest

from pipeline.collective import advise, detect_topology
from pipeline.collective.ranks import apply_rank_plan, plan_rank, plan_ranks, worker_gpu

FIXTURES = Path(__file__).parent / "fixtures"


def _plans(tree, user_env=None):
    topo = detect_topology(FIXTURES / tree)
    return topo, plan_ranks(topo, advise(topo, user_env or {}))


def test_every_dgx_h100_rank_starts_on_its_own_rail():
    _, plans = _plans("dgx_h100")
    firsts = [p.env["NCCL_IB_HCA"].lstrip("=").split(",")[0] for p in plans]
    assert firsts == ["mlx5_0:1", "mlx5_3:1", "mlx5_4:1", "mlx5_5:1", "mlx5_6:1", "mlx5_9:1",
                      "mlx5_10:1", "mlx5_11:1"]
    assert [p.rail for p in plans] == firsts
    # then the rails of its own socket (NODE) before the other socket's (SYS)
    assert plans[4].env["NCCL_IB_HCA"] == (
        "=mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1,mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1")
    assert [p.cpus for p in plans] == ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    # the same eight rails for every rank, only the order differs
    assert {frozenset(p.env["NCCL_IB_HCA"].lstrip("=").split(",")) for p in plans} == {
        frozenset(firsts)}


def test_a_rank_whose_rail_is_down_starts_on_the_nearest_working_rail():
    _, plans = _plans("dgx_h100_rail_down")
    assert plans[3].rail is None
    assert plans[3].env["NCCL_IB_HCA"].startswith("=mlx5_0:1,")
    assert "mlx5_5" not in plans[3].env["NCCL_IB_HCA"]
    assert "no usable rail of its own" in plans[3].reasons["NCCL_IB_HCA"]


def test_a100_pair_partner_rail_comes_second():
    _, plans = _plans("dgx_a100")
    assert plans[1].env["NCCL_IB_HCA"].startswith("=mlx5_1:1,mlx5_0:1,")
    assert plans[1].cpus == "48-63,176-191" and plans[1].numa_node == 3


def test_no_per_rank_hca_without_rdma_or_when_the_user_set_it():
    _, plans = _plans("cloud_vm")
    assert plans[0].env == {} and plans[0].cpus == "0-7"
    _, plans = _plans("dgx_h100", {"NCCL_IB_HCA": "=mlx5_0:1"})
    assert all(p.env == {} for p in plans)


def test_plan_rank_rejects_a_gpu_the_node_does_not_have():
    topo = detect_topology(FIXTURES / "cloud_vm")
    with pytest.raises(ValueError, match="GPU 3 is not on ip-10-0-3-17"):
        plan_rank(topo, advise(topo, {}), 3, local_rank=0)


def test_worker_gpu_follows_cuda_visible_devices():
    assert worker_gpu("3", 0) == 3  # Ray gives the worker one GPU
    assert worker_gpu("4,5,6,7", 2) == 6  # several visible, the worker's device index picks
    assert worker_gpu(None, 1) == 1
    assert worker_gpu("GPU-9e0c7a1b-44d2", 0) is None  # UUIDs cannot be mapped without NVML
    assert worker_gpu("0", 1) is None


def test_apply_sets_the_ranks_env_and_pins_within_the_allowed_cpus():
    topo, plans = _plans("dgx_h100")
    table = {topo.hostname: [p.as_dict() for p in plans]}
    allowed = os.sched_getaffinity(0)
    cpu = min(allowed)
    table[topo.hostname][5]["cpus"] = f"{cpu}"
    env = {"CUDA_VISIBLE_DEVICES": "5", "NCCL_IB_HCA": "=node-common"}
    try:
        applied = apply_rank_plan(table, device_index=0, environ=env, hostname=topo.hostname)
        assert os.sched_getaffinity(0) == {cpu}
    finally:
        os.sched_setaffinity(0, allowed)
    assert env["NCCL_IB_HCA"].startswith("=mlx5_9:1,")
    assert applied == {"host": "dgx-h100-01", "gpu": 5, "rail": "mlx5_9:1",
                       "env": {"NCCL_IB_HCA": env["NCCL_IB_HCA"]}, "cpus": f"{cpu}"}


def test_apply_does_nothing_on_an_unknown_host_or_gpu():
    topo, plans = _plans("dgx_h100")
    table = {topo.hostname: [p.as_dict() for p in plans]}
    env = {"CUDA_VISIBLE_DEVICES": "0"}
    assert apply_rank_plan(table, device_index=0, environ=env, hostname="elsewhere") is None
    assert apply_rank_plan(None, device_index=0, environ=env, hostname=topo.hostname) is None
    assert env == {"CUDA_VISIBLE_DEVICES": "0"}
