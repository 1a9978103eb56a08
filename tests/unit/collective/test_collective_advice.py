"""Advice per kind of node: the exact env, and the warnings a user must see."""

from pathlib import Path

import pytest

from pipeline.collective import advise, detect_topology

FIXTURES = Path(__file__).parent / "fixtures"

SOCKET = {"GLOO_SOCKET_IFNAME": "eth0", "NCCL_SOCKET_IFNAME": "=eth0"}

CASES = {
    "no_rdma": ({"NCCL_IB_DISABLE": "1", **SOCKET}, []),
    "ib_gdr": ({"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_NET_GDR_LEVEL": "PHB",
                "NCCL_SOCKET_IFNAME": "=eno1", "GLOO_SOCKET_IFNAME": "eno1"}, []),
    "roce_v2": ({"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_GID_INDEX": "3", **SOCKET},
                ["GPUDirect RDMA is off", "GPU 0 is on NUMA node 0 but the NICs (mlx5_0) "
                                          "are on NUMA node 1"]),
    "two_nics_one_virtual": ({"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=enp3s0",
                              "GLOO_SOCKET_IFNAME": "enp3s0"}, []),
    "loopback_only": ({"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "=lo",
                       "GLOO_SOCKET_IFNAME": "lo"}, ["only the loopback interface is up"]),
}


@pytest.mark.parametrize("tree", sorted(CASES))
def test_exact_env_and_warnings(tree):
    env, warnings = CASES[tree]
    advice = advise(detect_topology(FIXTURES / tree), {})
    assert advice.env == env
    assert set(advice.reasons) == set(env)
    assert len(advice.warnings) == len(warnings), advice.warnings
    for expected, got in zip(warnings, advice.warnings, strict=True):
        assert expected in got
    assert advice.conflicts == []


def test_virtual_interfaces_are_named_in_the_reason():
    advice = advise(detect_topology(FIXTURES / "two_nics_one_virtual"), {})
    assert "skipped virtual docker0, veth1a2b" in advice.reasons["NCCL_SOCKET_IFNAME"]


def test_user_settings_are_kept_and_disagreements_reported():
    topo = detect_topology(FIXTURES / "roce_v2")
    user = {"NCCL_IB_GID_INDEX": "0", "NCCL_SOCKET_IFNAME": "eth9", "GLOO_SOCKET_IFNAME": "eth0"}
    advice = advise(topo, user)
    assert advice.env == {"NCCL_IB_HCA": "=mlx5_0:1"}
    assert len(advice.conflicts) == 3
    gid, ifname, missing = advice.conflicts
    assert gid.startswith("NCCL_IB_GID_INDEX='0' is set by you and kept; Feedline would set '3'")
    assert ifname.startswith("NCCL_SOCKET_IFNAME='eth9' is set by you and kept")
    assert "matches no interface on gpu-roce-1" in missing


def test_disabling_ib_on_a_node_with_active_rdma_is_a_conflict():
    advice = advise(detect_topology(FIXTURES / "ib_gdr"), {"NCCL_IB_DISABLE": "1"})
    assert advice.conflicts == [
        "NCCL_IB_DISABLE='1' turns off the active RDMA ports mlx5_0:1, mlx5_1:1; unset it to "
        "let NCCL use RDMA"]
    assert "NCCL_IB_DISABLE" not in advice.env


def test_an_rdma_device_without_an_active_port_is_not_advised(tmp_path):
    port = tmp_path / "sys/class/infiniband/mlx5_0/ports/1"
    port.mkdir(parents=True)
    (port / "state").write_text("1: DOWN\n")
    (port / "link_layer").write_text("InfiniBand\n")
    advice = advise(detect_topology(tmp_path), {})
    assert advice.env == {"NCCL_IB_DISABLE": "1"}
    assert any("mlx5_0 have no usable ACTIVE port" in w for w in advice.warnings)
