"""GPU→NIC pairing and the node advice on the machines users run on (fixture trees built by
fixtures/make_fixtures.py from the public layouts of those machines)."""

import shutil
from pathlib import Path

import pytest

from pipeline.collective import advise, detect_topology
from pipeline.collective._topo_smi import parse_topo
from pipeline.collective.rails import pair_rails

FIXTURES = Path(__file__).parent / "fixtures"

H100_RAILS = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]

# tree: (GPUs, interconnect, network, {gpu: (rail, distance)}, NCCL_IB_HCA, socket, warnings)
CASES = {
    "dgx_h100": (8, "nvlink", "infiniband",
                 {g: (n, "PIX") for g, n in enumerate(H100_RAILS)},
                 "=" + ",".join(f"{n}:1" for n in H100_RAILS), "eno3", []),
    "dgx_h100_rail_down": (8, "nvlink", "infiniband",
                           {g: (n, "PIX") for g, n in enumerate(H100_RAILS)},
                           "=" + ",".join(f"{n}:1" for n in H100_RAILS if n != "mlx5_5"),
                           "eno3",
                           ["rail mlx5_5 (nearest to GPU 3) is DOWN, phys_state Disabled: "
                            "GPU 3 has no working rail of its own"]),
    "dgx_a100": (8, "nvlink", "infiniband",
                 {0: ("mlx5_0", "PXB"), 1: ("mlx5_1", "PXB"), 2: ("mlx5_2", "PXB"),
                  3: ("mlx5_3", "PXB"), 4: ("mlx5_6", "PXB"), 5: ("mlx5_7", "PXB"),
                  6: ("mlx5_8", "PXB"), 7: ("mlx5_9", "PXB")},
                 "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1",
                 "bond0", []),
    "pcie_roce": (4, "pcie", "roce",
                  {0: ("mlx5_0", "PXB"), 1: ("mlx5_1", "PXB"), 2: (None, "SYS"),
                   3: (None, "SYS")},
                  "=mlx5_0:1,mlx5_1:1", "eno1",
                  ["GPU 2 has no rail of its own: its nearest RDMA NIC (mlx5_0, mlx5_1) is SYS, "
                   "farther than PXB, so GPUDirect RDMA is off for it",
                   "GPU 3 has no rail of its own",
                   "RDMA is present but GPUDirect RDMA is off"]),
    "cloud_vm": (1, "single-gpu", "ethernet", {}, None, "ens6", []),
}


@pytest.mark.parametrize("tree", sorted(CASES))
def test_gpus_pairing_rails_socket_and_warnings(tree):
    count, interconnect, network, pairs, hca, ifname, warnings = CASES[tree]
    topo = detect_topology(FIXTURES / tree)
    advice = advise(topo, {})
    assert (len(topo.gpus), topo.interconnect, topo.network) == (count, interconnect, network)
    rails = pair_rails(topo)
    assert {p.gpu: (p.rail, p.distance) for p in rails.pairs} == pairs
    assert advice.env.get("NCCL_IB_HCA") == hca
    assert advice.env["NCCL_SOCKET_IFNAME"] == "=" + ifname
    assert advice.env["GLOO_SOCKET_IFNAME"] == ifname
    assert len(advice.warnings) == len(warnings), advice.warnings
    for expected, got in zip(warnings, advice.warnings, strict=True):
        assert got.startswith(expected), got
    assert advice.conflicts == []


def test_dgx_h100_leaves_the_storage_ports_out_and_says_so():
    topo = detect_topology(FIXTURES / "dgx_h100")
    rails = pair_rails(topo)
    assert rails.compute == tuple(H100_RAILS)
    assert rails.storage == ("mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8")
    advice = advise(topo, {})
    assert advice.notes == ["mlx5_1, mlx5_2, mlx5_7, mlx5_8 are NODE/SYS to every GPU: storage "
                            "or in-band ports; left out of NCCL_IB_HCA"]
    assert "left out: mlx5_1, mlx5_2, mlx5_7, mlx5_8" in advice.reasons["NCCL_IB_HCA"]
    # all twelve ports are up: the old advice listed every one of them
    assert len(topo.active_rdma_ports) == 12
    assert topo.gpus[0].cpu_affinity == "0-55,112-167" and topo.gpus[7].numa_node == 1


def test_dgx_h100_ansi_header_is_read_and_nothing_is_left_unexplained():
    topo = detect_topology(FIXTURES / "dgx_h100")
    assert "\x1b[4m" in (FIXTURES / "dgx_h100/commands/nvidia-smi-topo-m.txt").read_text()
    assert topo.gpu_matrix[0] == ("X", *["NV18"] * 7)
    assert (topo.gpu_source, topo.nic_distance_source) == ("nvidia-smi", "nvidia-smi")
    assert topo.notes == ()
    assert topo.gpus[3].uuid.startswith("GPU-")


def test_sysfs_pci_tree_gives_the_same_pairing_when_nvidia_smi_is_missing(tmp_path):
    tree = tmp_path / "dgx"
    shutil.copytree(FIXTURES / "dgx_h100", tree, symlinks=True)
    shutil.rmtree(tree / "commands")
    topo = detect_topology(tree)
    assert (topo.gpu_source, topo.nic_distance_source) == ("sysfs", "sysfs")
    assert topo.gpus[0].nic_distance == detect_topology(FIXTURES / "dgx_h100").gpus[0].nic_distance
    rails = pair_rails(topo)
    assert [p.rail for p in rails.pairs] == H100_RAILS
    assert any("nvidia-smi-query-gpu.txt not found" in n for n in topo.notes)
    assert topo.gpus[5].cpu_affinity == "56-111,168-223"  # local_cpulist


def test_a100_pairs_spread_over_the_two_rails_they_share():
    rails = pair_rails(detect_topology(FIXTURES / "dgx_a100"))
    assert rails.rail_of(0).alternatives == ("mlx5_1",)
    assert rails.rail_of(1).alternatives == ("mlx5_0",)
    assert rails.storage == ("mlx5_4", "mlx5_5")


def test_bond_and_vlan_are_real_interfaces_and_bond_ports_are_not_chosen():
    topo = detect_topology(FIXTURES / "dgx_a100")
    by_name = {i.name: i for i in topo.interfaces}
    assert (by_name["bond0"].kind, by_name["bond0"].virtual) == ("bond", False)
    assert (by_name["bond0.200"].kind, by_name["bond0.200"].virtual) == ("vlan", False)
    assert by_name["enp225s0"].master == "bond0" and by_name["bond0"].master is None
    reason = advise(topo, {}).reasons["NCCL_SOCKET_IFNAME"]
    assert reason.startswith("bond0: bond, default route (metric 0)")


def test_default_route_is_chosen_by_metric_not_by_name():
    topo = detect_topology(FIXTURES / "cloud_vm")
    metrics = {i.name: i.default_metric for i in topo.interfaces if i.default_route}
    assert metrics == {"ens5": 200, "ens6": 100}
    reason = advise(topo, {}).reasons["NCCL_SOCKET_IFNAME"]
    assert "default routes with a higher metric: ens5 (metric 200)" in reason
    assert "skipped virtual docker0" in reason


def test_a_missing_rail_warns_and_does_not_promote_a_storage_port(tmp_path):
    tree = tmp_path / "dgx"
    shutil.copytree(FIXTURES / "dgx_h100", tree, symlinks=True)
    (tree / "sys/class/infiniband/mlx5_5").unlink()  # the HCA did not come up at all
    topo = detect_topology(tree)
    rails = pair_rails(topo)
    assert "mlx5_5" not in rails.compute and rails.rail_of(3).rail is None
    advice = advise(topo, {})
    assert advice.env["NCCL_IB_HCA"] == "=" + ",".join(
        f"{n}:1" for n in H100_RAILS if n != "mlx5_5")
    assert any(w.startswith("GPU 3 has no rail of its own: its nearest RDMA NIC (mlx5_0, "
                            "mlx5_1, mlx5_2, mlx5_3, mlx5_4) is NODE") for w in advice.warnings)


def test_a_user_hca_list_with_storage_ports_is_a_conflict():
    advice = advise(detect_topology(FIXTURES / "dgx_h100"), {"NCCL_IB_HCA": "mlx5"})
    assert "NCCL_IB_HCA" not in advice.env
    assert any(c.startswith("NCCL_IB_HCA='mlx5' includes mlx5_1, mlx5_2, mlx5_7, mlx5_8")
               for c in advice.conflicts)


OLD_FORMAT = """\
        GPU0    GPU1    mlx5_0  mlx5_1  CPU Affinity
GPU0     X      SOC     PIX     SOC     0-11
GPU1    SOC      X      SOC     PIX     12-23
mlx5_0  PIX     SOC      X      SOC
mlx5_1  SOC     PIX     SOC      X

Legend:

  X   = Self
  SOC  = Connection traversing PCIe as well as the SMP link between CPU sockets(e.g. QPI)
"""


def test_topo_parser_reads_space_separated_old_output_with_soc():
    topo = parse_topo(OLD_FORMAT)
    assert topo.gpus == (0, 1) and topo.gpu_links == (("X", "SYS"), ("SYS", "X"))
    assert topo.nic_distance == {0: {"mlx5_0": "PIX", "mlx5_1": "SYS"},
                                 1: {"mlx5_0": "SYS", "mlx5_1": "PIX"}}
    assert topo.cpu_affinity == {0: "0-11", 1: "12-23"} and topo.problems == ()


# `nvidia-smi topo -m` on a one-GPU H200 VM (driver 580.159.04), as captured through the device
# tool on 2026-12-04: ANSI underline codes in the header, and an empty cell (two tabs) before
# "GPU NUMA ID". sysfs there says NUMA -1 for the GPU; this row is where NUMA 0 comes from.
H200_VM = ("\t\x1b[4mGPU0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
           "GPU0\t X \t0-15\t0\t\tN/A\n\nLegend:\n\n  X    = Self\n")


def test_topo_parser_reads_a_single_gpu_vm_with_ansi_codes_and_an_empty_cell():
    topo = parse_topo(H200_VM)
    assert topo.gpus == (0,) and topo.gpu_links == (("X",),)
    assert topo.cpu_affinity == {0: "0-15"} and topo.numa_affinity == {0: 0}
    assert topo.problems == ()


def test_topo_parser_reports_what_it_cannot_read():
    assert parse_topo("nvidia-smi: command not found").problems == (
        "nvidia-smi topo -m: no header row with GPU0",)
    text = "\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n"  # no NIC Legend
    assert "NIC0 is not named in the NIC Legend" in parse_topo(text).problems[0]
