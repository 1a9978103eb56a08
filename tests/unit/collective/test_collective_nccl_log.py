# ruff: noqa: E501  (captured NCCL log lines are kept whole)
"""What NCCL did, read from NCCL_DEBUG=INFO text in the formats NCCL 2.18-2.21 print, against
the advice: a run that fell back to sockets, or opened a storage port, is flagged."""

from pathlib import Path

from pipeline.collective import advise, detect_topology
from pipeline.collective.nccl_log import check_nccl_log, parse_nccl_log

FIXTURES = Path(__file__).parent / "fixtures"

# Two DGX H100 nodes, rank 0 and 8 of 16 shown; IB with GPUDirect between nodes, NVLink inside.
IB_RUN = """\
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48211 [0] NCCL INFO Bootstrap : Using eno3:10.110.0.11<0>
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48211 [0] NCCL INFO NCCL_IB_HCA set to =mlx5_0:1,mlx5_3:1,mlx5_4:1,mlx5_5:1,mlx5_6:1,mlx5_9:1,mlx5_10:1,mlx5_11:1
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB [2]mlx5_4:1/IB [3]mlx5_5:1/IB [4]mlx5_6:1/IB [5]mlx5_9:1/IB [6]mlx5_10:1/IB [7]mlx5_11:1/IB [RO]; OOB eno3:10.110.0.11<0>
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Using non-device net plugin version 0
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Using network IB
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO comm 0x55986b8b8560 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x5ae77eb5ea4ec1ee - Init START
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Setting affinity for GPU 0 to ffffff,ffffffff,ffff0000,00000000,00ffffff,ffffffff,ffffffff
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Channel 00/16 :    0   7   6   5   4   3   2   1   8  15  14  13  12  11  10   9
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [receive] via NET/IB/1/GDRDMA
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Channel 00/0 : 0[0] -> 7[7] via P2P/CUMEM/read
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/IB/0/GDRDMA
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO Connected all rings
(RayTrainWorker pid=48211, ip=10.110.0.11) dgx-h100-01:48211:48390 [0] NCCL INFO comm 0x55986b8b8560 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x5ae77eb5ea4ec1ee - Init COMPLETE
"""

# The same job when the IB ports could not be opened: NCCL falls back to TCP without failing.
SOCKET_RUN = """\
dgx-h100-01:48211:48211 [0] NCCL INFO Bootstrap : Using eno3:10.110.0.11<0>
dgx-h100-01:48211:48390 [0] NCCL INFO NET/IB : No device found.
dgx-h100-01:48211:48390 [0] NCCL INFO NET/Socket : Using [0]eno3:10.110.0.11<0>
dgx-h100-01:48211:48390 [0] NCCL INFO Using network Socket
dgx-h100-01:48211:48390 [0] NCCL INFO comm 0x55f90cbfd740 rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 1b000 commId 0x795b968dc454cfee - Init START
dgx-h100-01:48211:48390 [0] NCCL INFO Channel 00/0 : 9[1] -> 0[0] [receive] via NET/Socket/0
dgx-h100-01:48211:48390 [0] NCCL INFO Channel 00/0 : 0[0] -> 7[7] via P2P/IPC/read
dgx-h100-01:48211:48390 [0] NCCL INFO Channel 01/0 : 0[0] -> 8[0] [send] via NET/Socket/0
dgx-h100-01:48212:48391 [1] NCCL INFO comm 0x561dde2fb110 rank 1 nranks 16 cudaDev 1 nvmlDev 1 busId 43000 commId 0x795b968dc454cfee - Init START
dgx-h100-01:48212:48391 [1] NCCL INFO Channel 00 : 1[1] -> 0[0] via SHM/direct/direct
"""

# Older NCCL (2.10): no commId, the IB list names a storage port, channels without GDRDMA.
OLD_RUN = """\
[1] node2:22555:22555 [0] NCCL INFO NET/IB : Using [0]mlx5_1:1/RoCE [1]mlx5_0:1/IB ; OOB eno3:10.110.0.12<0>
[1] node2:22555:22555 [0] NCCL INFO comm 0x1277bf60 rank 8 nranks 16 cudaDev 0 busId 1b000 - Init START
[1] node2:22555:22555 [0] NCCL INFO Channel 00 : 0[1b000] -> 8[1b000] [receive] via NET/IB/1
[1] node2:22555:22555 [0] NCCL INFO comm 0x1277bf60 rank 8 nranks 16 cudaDev 0 busId 1b000 - Init COMPLETE
"""


def _advised():
    return advise(detect_topology(FIXTURES / "dgx_h100"), {}).env


def test_ib_run_matches_the_advice():
    log = parse_nccl_log(IB_RUN)
    (comm,) = log.comms
    assert (comm.comm, comm.host, comm.rank, comm.nranks) == (
        "0x5ae77eb5ea4ec1ee", "dgx-h100-01", 0, 16)
    assert comm.transports == ("NET/IB", "P2P") and comm.gdr is True
    assert log.networks == {"dgx-h100-01:48211": "IB"}
    assert log.ib_ports["dgx-h100-01:48211"][:2] == ("mlx5_0:1", "mlx5_3:1")
    assert check_nccl_log(log, _advised()) == []


def test_socket_fallback_is_flagged_against_ib_advice():
    log = parse_nccl_log(SOCKET_RUN)
    assert {c.rank: c.transports for c in log.comms} == {0: ("NET/Socket", "P2P"), 1: ("SHM",)}
    assert log.socket_ifaces == {"dgx-h100-01:48211": ("eno3",)}
    problems = check_nccl_log(log, _advised())
    assert len(problems) == 1
    assert problems[0].startswith("advised IB (NCCL_IB_HCA==mlx5_0:1,mlx5_3:1,")
    assert "NCCL used sockets: communicator 0x795b968dc454cfee on dgx-h100-01 (rank 0 of 16)" \
        in problems[0]


def test_sockets_are_not_a_mismatch_when_sockets_were_advised():
    env = advise(detect_topology(FIXTURES / "cloud_vm"), {}).env
    env = {**env, "NCCL_SOCKET_IFNAME": "=eno3"}
    assert check_nccl_log(parse_nccl_log(SOCKET_RUN), env) == []


def test_storage_port_and_missing_gpudirect_are_flagged():
    log = parse_nccl_log(OLD_RUN)
    (comm,) = log.comms
    assert comm.comm == "0x1277bf60" and comm.gdr is False
    problems = check_nccl_log(log, _advised())
    assert any(p.startswith("advised GPUDirect RDMA, NCCL used NET/IB without it") for p in problems)
    assert any(p.startswith("NCCL on node2:22555 opened mlx5_1:1, outside the advised rails")
               for p in problems)
