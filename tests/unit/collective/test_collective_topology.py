"""Topology detection from fixture trees: what each kind of node looks like to Feedline."""

import json
import struct
from pathlib import Path

from pipeline.collective import detect_topology

FIXTURES = Path(__file__).parent / "fixtures"


def test_infiniband_node_with_gpudirect_and_nvlink():
    topo = detect_topology(FIXTURES / "ib_gdr")
    assert topo.hostname == "gpu-ib-1"
    assert topo.gpu_source == "nvidia-smi"
    assert [(g.name, g.pci_bus_id, g.numa_node) for g in topo.gpus] == [
        ("NVIDIA H100 80GB HBM3", "0000:17:00.0", 0),
        ("NVIDIA H100 80GB HBM3", "0000:b1:00.0", 1)]
    assert topo.gpu_matrix == (("X", "NV18"), ("NV18", "X"))
    assert topo.interconnect == "nvlink"
    assert topo.network == "infiniband"
    assert topo.gdr == "nvidia_peermem"
    port = topo.rdma[0].ports[0]
    assert (port.state, port.rate_gbps, port.link_layer, port.netdev) == (
        "ACTIVE", 200.0, "InfiniBand", "ib0")


def test_roce_v2_picks_the_ipv4_mapped_v2_gid_not_the_first_v2_entry():
    topo = detect_topology(FIXTURES / "roce_v2")
    port = topo.rdma[0].ports[0]
    assert port.kind == "RoCE"
    assert port.roce_v2_gid_index == 3  # index 1 is RoCE v2 too, but link-local
    assert topo.gdr == "off"  # nvidia loaded, no peermem, proprietary module: no dma-buf
    assert topo.gpu_source == "sysfs" and topo.gpus[0].numa_node == 0


def test_virtual_interfaces_are_recognised_without_a_name_list():
    topo = detect_topology(FIXTURES / "two_nics_one_virtual")
    kinds = {i.name: i.virtual for i in topo.interfaces}
    assert kinds == {"docker0": True, "enp3s0": False, "lo": True, "veth1a2b": True}


def test_an_empty_root_is_unknown_everywhere_and_does_not_crash(tmp_path):
    topo = detect_topology(tmp_path)
    assert (topo.gpus, topo.rdma, topo.interfaces) == ((), (), None)
    assert (topo.gdr, topo.acs, topo.network, topo.interconnect) == (
        "unknown", "unknown", "unknown", "none")
    assert any("network interfaces unknown" in n for n in topo.notes)


def test_as_dict_is_json_with_derived_fields():
    data = json.loads(json.dumps(detect_topology(FIXTURES / "ib_gdr").as_dict()))
    assert data["network"] == "infiniband" and data["interconnect"] == "nvlink"
    assert data["rdma"][1]["name"] == "mlx5_1"


def _bridge(root: Path, bdf: str, acs_control: int | None) -> None:
    dev = root / "sys/bus/pci/devices" / bdf
    dev.mkdir(parents=True)
    (dev / "class").write_text("0x060400\n")
    config = bytearray(4096)
    # extended capability list at 0x100: AER (id 1) -> ACS (id 0xD) at 0x148 -> end
    struct.pack_into("<I", config, 0x100, 0x0001 | (1 << 16) | (0x148 << 20))
    if acs_control is not None:
        struct.pack_into("<I", config, 0x148, 0x000D | (1 << 16))
        struct.pack_into("<HH", config, 0x14C, 0x005F, acs_control)
    (dev / "config").write_bytes(bytes(config))


def test_pcie_acs_redirect_is_found_in_bridge_config_space(tmp_path):
    _bridge(tmp_path, "0000:00:01.0", acs_control=0x0000)
    _bridge(tmp_path, "0000:16:02.0", acs_control=0x001D)  # SV | ReqRedir | CmpltRedir | UF
    topo = detect_topology(tmp_path)
    assert (topo.acs, topo.acs_bridges) == ("on", ("0000:16:02.0",))


def test_pcie_acs_off_when_readable_bridges_do_not_redirect(tmp_path):
    _bridge(tmp_path, "0000:00:01.0", acs_control=None)
    assert detect_topology(tmp_path).acs == "off"


def test_pcie_acs_unknown_when_config_space_is_truncated(tmp_path):
    # Non-root users read only the first 64 bytes; that must not read as "off".
    dev = tmp_path / "sys/bus/pci/devices/0000:00:01.0"
    dev.mkdir(parents=True)
    (dev / "class").write_text("0x060400\n")
    (dev / "config").write_bytes(bytes(64))
    assert detect_topology(tmp_path).acs == "unknown"
