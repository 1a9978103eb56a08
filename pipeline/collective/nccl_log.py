"""What NCCL actually did, read from its ``NCCL_DEBUG=INFO`` output, checked against the advice.

Advice is a prediction; NCCL decides at communicator init and says so in its log, one line per
connection. The lines this reads (prefixes such as Ray's ``(RayTrainWorker pid=…, ip=…)`` or
mpirun's ``[1]`` are skipped)::

    host:pid:tid [dev] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_3:1/IB ; OOB eno3:10.0.0.1<0>
    host:pid:tid [dev] NCCL INFO NET/Socket : Using [0]eth0:10.0.0.1<0>
    host:pid:tid [dev] NCCL INFO Using network IB            (or: Using network Socket)
    host:pid:tid [dev] NCCL INFO comm 0x55… rank 0 nranks 16 cudaDev 0 nvmlDev 0 busId 18000 \
commId 0x49bb… - Init START
    host:pid:tid [dev] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
    host:pid:tid [dev] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC/read
    host:pid:tid [dev] NCCL INFO Channel 00 : 2[1] -> 0[0] via SHM/direct/direct

A connection line belongs to the communicator whose ``Init START`` the same thread printed
last (NCCL connects in the init thread). Pure: the caller reads the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

_PREFIX = re.compile(r"(?P<host>[^\s:\[\]()]+):(?P<pid>\d+):(?P<tid>\d+) \[\d+\] NCCL INFO "
                     r"(?P<msg>.*)$")
_COMM = re.compile(r"comm (?P<ptr>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+)"
                   r"(?:.*? commId (?P<id>0x[0-9a-fA-F]+))?.* - Init (?P<phase>START|COMPLETE)")
_CHANNEL = re.compile(r"Channel \d+(?:/\d+)? : \d+\[[0-9a-fA-F]+\] -> \d+\[[0-9a-fA-F]+\]"
                      r"(?: \[(?:send|receive)\])? via (?P<via>\S+)")
_NETWORK = re.compile(r"Using network (?P<net>\w+)")
_NET_USING = re.compile(r"NET/(?P<kind>IB|Socket) : Using (?P<list>.*)$")
_ENTRY = re.compile(r"\[\d+\]([^\s;<]+)")


@dataclass(frozen=True, kw_only=True)
class CommUse:
    """One communicator as one process saw it."""

    comm: str
    """``commId`` (shared by every rank of the communicator), else the comm pointer."""
    host: str
    pid: int
    rank: int | None
    nranks: int | None
    transports: tuple[str, ...]
    """Sorted: ``NET/IB``, ``NET/Socket``, ``NET/<plugin>``, ``P2P``, ``SHM``, ``CollNet``."""
    gdr: bool | None
    """Whether its network connections used GPUDirect RDMA; None without network connections."""


@dataclass(frozen=True, kw_only=True)
class NcclLog:
    comms: tuple[CommUse, ...]
    networks: dict[str, str] = field(default_factory=dict)
    """``host:pid`` → ``IB`` or ``Socket`` (``Using network …``)."""
    ib_ports: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """``host:pid`` → ``mlx5_0:1`` … that ``NET/IB : Using`` listed."""
    socket_ifaces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """``host:pid`` → interfaces ``NET/Socket : Using`` listed."""

    @property
    def transports(self) -> tuple[str, ...]:
        return tuple(sorted({t for c in self.comms for t in c.transports}))


def parse_nccl_log(text: str) -> NcclLog:
    """Communicators and the transports each used, from ``NCCL_DEBUG=INFO`` text."""
    comms: dict[tuple[str, int, str], dict] = {}
    current: dict[tuple[str, int, int], tuple[str, int, str]] = {}
    latest: dict[tuple[str, int], tuple[str, int, str]] = {}
    networks, ib_ports, sockets = {}, {}, {}
    for line in text.splitlines():
        match = _PREFIX.search(line)
        if match is None:
            continue
        host, pid, tid, msg = (match["host"], int(match["pid"]), int(match["tid"]),
                               match["msg"].strip())
        proc = f"{host}:{pid}"
        if m := _COMM.search(msg):
            key = (host, pid, m["id"] or m["ptr"])
            entry = comms.setdefault(key, {"rank": int(m["rank"]), "nranks": int(m["nranks"]),
                                           "transports": set(), "gdr": set()})
            entry["rank"], entry["nranks"] = int(m["rank"]), int(m["nranks"])
            current[(host, pid, tid)] = latest[(host, pid)] = key
        elif m := _CHANNEL.search(msg):
            key = current.get((host, pid, tid)) or latest.get((host, pid)) or (host, pid, "?")
            entry = comms.setdefault(key, {"rank": None, "nranks": None, "transports": set(),
                                           "gdr": set()})
            transport = _transport(m["via"])
            entry["transports"].add(transport)
            if transport.startswith("NET/"):
                entry["gdr"].add("GDRDMA" in m["via"])
        elif m := _NETWORK.search(msg):
            networks[proc] = m["net"]
        elif m := _NET_USING.search(msg):
            names = tuple(_ENTRY.findall(m["list"].split("; OOB")[0]))
            if m["kind"] == "IB":
                ib_ports[proc] = tuple(n.split("/")[0] for n in names)
            else:
                sockets[proc] = tuple(n.split(":")[0] for n in names)
    out = [CommUse(comm=key[2], host=key[0], pid=key[1], rank=v["rank"], nranks=v["nranks"],
                   transports=tuple(sorted(v["transports"])),
                   gdr=None if not v["gdr"] else all(v["gdr"]))
           for key, v in comms.items()]
    return NcclLog(comms=tuple(out), networks=networks, ib_ports=ib_ports,
                   socket_ifaces=sockets)


def _transport(via: str) -> str:
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        # NCCL's own IB transport, or the same code as an external plugin (IBext_v8).
        return "NET/IB" if parts[1].startswith("IB") else f"NET/{parts[1]}"
    return parts[0]


def check_nccl_log(log: NcclLog, env: Mapping[str, str]) -> list[str]:
    """Where NCCL did something other than ``env`` (the advised or applied settings) asked."""
    problems = []
    hca = env.get("NCCL_IB_HCA", "")
    ib_advised = bool(hca) and env.get("NCCL_IB_DISABLE", "0") in ("", "0")
    socket_advised = env.get("NCCL_IB_DISABLE", "0") not in ("", "0")
    for comm in log.comms:
        where = (f"communicator {comm.comm} on {comm.host} (rank {_n(comm.rank)} of "
                 f"{_n(comm.nranks)})")
        if ib_advised and "NET/Socket" in comm.transports:
            problems.append(f"advised IB (NCCL_IB_HCA={hca}), NCCL used sockets: {where} "
                            "connected over NET/Socket; look for 'NET/IB : No device found' and "
                            "check NCCL_IB_HCA, NCCL_IB_GID_INDEX and that the ports are ACTIVE")
        if socket_advised and "NET/IB" in comm.transports:
            problems.append(f"advised sockets (NCCL_IB_DISABLE=1), NCCL used IB: {where}")
        if (ib_advised and "NCCL_NET_GDR_LEVEL" in env and "NET/IB" in comm.transports
                and comm.gdr is False):
            problems.append(f"advised GPUDirect RDMA, NCCL used NET/IB without it: {where} "
                            "bounces every transfer through host memory; is nvidia_peermem "
                            "loaded on that node?")
    for proc, net in sorted(log.networks.items()):
        if ib_advised and net == "Socket" and not any(
                f"{c.host}:{c.pid}" == proc and "NET/Socket" in c.transports for c in log.comms):
            problems.append(f"advised IB (NCCL_IB_HCA={hca}), NCCL used sockets: process {proc} "
                            "says 'Using network Socket'")
    wanted = {h.split(":")[0] for h in hca.lstrip("=").split(",") if h} if ib_advised else set()
    for proc, ports in sorted(log.ib_ports.items()):
        extra = [p for p in ports if p.split(":")[0] not in wanted]
        if wanted and extra:
            problems.append(f"NCCL on {proc} opened {', '.join(extra)}, outside the advised "
                            f"rails ({hca}): storage or in-band ports may carry gradients")
    ifname = env.get("NCCL_SOCKET_IFNAME", "")
    if ifname and not ifname.startswith("^"):
        allowed = [n for n in ifname.lstrip("=").split(",") if n]
        exact = ifname.startswith("=")
        for proc, ifaces in sorted(log.socket_ifaces.items()):
            bad = [i for i in ifaces if not any(i == a or (not exact and i.startswith(a))
                                                for a in allowed)]
            if bad:
                problems.append(f"NCCL on {proc} used socket interface {', '.join(bad)}, not "
                                f"the advised NCCL_SOCKET_IFNAME={ifname}")
    return problems


def _n(value: int | None) -> str:
    return "?" if value is None else str(value)
