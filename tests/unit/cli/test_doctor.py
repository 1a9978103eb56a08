"""`pipeline doctor` on captured trees: the pairing, the per-rank plan, the files --root reads,
and the NCCL-log check."""

import json
from pathlib import Path

import pytest

from pipeline.cli.main import build_parser, main

FIXTURES = Path(__file__).resolve().parents[1] / "collective" / "fixtures"


@pytest.fixture(autouse=True)
def _no_cluster(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    for key in ("NCCL_IB_HCA", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "GLOO_SOCKET_IFNAME"):
        monkeypatch.delenv(key, raising=False)


def _json(capsys, *args):
    assert main(["doctor", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_dgx_h100_json_has_pairing_rails_and_rank_plans(capsys):
    (node,) = _json(capsys, "--root", str(FIXTURES / "dgx_h100"))["nodes"]
    assert [(p["gpu"], p["rail"], p["distance"]) for p in node["rails"]["pairs"]][:2] == [
        (0, "mlx5_0", "PIX"), (1, "mlx5_3", "PIX")]
    assert node["rails"]["storage"] == ["mlx5_1", "mlx5_2", "mlx5_7", "mlx5_8"]
    assert node["nccl_env"]["NCCL_SOCKET_IFNAME"] == "=eno3"
    plans = node["rank_plans"]
    assert [p["rail"] for p in plans] == ["mlx5_0:1", "mlx5_3:1", "mlx5_4:1", "mlx5_5:1",
                                          "mlx5_6:1", "mlx5_9:1", "mlx5_10:1", "mlx5_11:1"]
    assert plans[7]["cpus"] == "56-111,168-223"
    assert any("left out of NCCL_IB_HCA" in n for n in node["notes"])


def test_table_shows_rails_ranks_and_the_down_rail(capsys):
    assert main(["doctor", "--root", str(FIXTURES / "dgx_h100_rail_down")]) == 0
    out = capsys.readouterr().out
    assert "GPU → rail" in out and "GPU3 → mlx5_5:1 PIX DOWN" in out
    assert "per local rank" in out and "rank 3 (GPU3): no own rail" in out
    assert "rail mlx5_5 (nearest to GPU 3) is DOWN" in " ".join(out.split())


def test_missing_recordings_are_a_note_not_a_silent_fallback(tmp_path, capsys):
    (node,) = _json(capsys, "--root", str(FIXTURES / "roce_v2"))["nodes"]
    assert any("commands/nvidia-smi-query-gpu.txt not found" in n for n in node["notes"])
    assert node["topology"]["gpu_source"] == "sysfs"


def test_help_documents_every_file_root_reads():
    doctor = build_parser()._subparsers._group_actions[0].choices["doctor"]
    text = doctor.format_help()
    for path in ("sys/class/infiniband", "sys/class/net", "sys/bus/pci/devices",
                 "sys/devices/system/node", "proc/net/route", "proc/net/vlan/config",
                 "proc/modules", "etc/hostname", "commands/nvidia-smi-query-gpu.txt",
                 "commands/nvidia-smi-topo-m.txt", "NVML", "nvidia-smi itself"):
        assert path in text, path


def test_nccl_log_mismatch_is_reported(tmp_path, capsys):
    log = tmp_path / "worker.log"
    log.write_text(
        "dgx-h100-01:48211:48390 [0] NCCL INFO NET/IB : No device found.\n"
        "dgx-h100-01:48211:48390 [0] NCCL INFO Using network Socket\n"
        "dgx-h100-01:48211:48390 [0] NCCL INFO comm 0x55f90cbfd740 rank 0 nranks 16 cudaDev 0 "
        "nvmlDev 0 busId 1b000 commId 0x795b968dc454cfee - Init START\n"
        "dgx-h100-01:48211:48390 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via "
        "NET/Socket/0\n")
    out = _json(capsys, "--root", str(FIXTURES / "dgx_h100"), "--nccl-log", str(log))
    assert out["nccl_log"]["transports"] == ["NET/Socket"]
    (problem,) = out["nccl_log"]["problems"]
    assert problem.startswith("advised IB (NCCL_IB_HCA==mlx5_0:1,")
    assert "NCCL used sockets" in problem
