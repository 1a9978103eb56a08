"""GPU→NIC pairing: which RDMA devices are compute rails and which are storage ports. Pure.

A DGX-class node has one RDMA NIC behind the same PCIe switch as each GPU (its *rail*) and
more adapters for storage and in-band management on their own switches. NCCL must get the rails
only: given every active port it may put gradient traffic on a storage link, and the storage
traffic on a rail. The rule, from the GPU→NIC distances ``nvidia-smi topo -m`` (or the PCI
tree) reports, nearest first ``PIX < PXB < PHB < NODE < SYS``:

- a GPU's rail is its nearest RDMA device; when several are equally near (two rails per GPU
  pair on an 8×A100), GPUs are spread over them, and all of them are rails;
- if any GPU has a NIC within ``PHB``, the node has rails, and a NIC that is only ``NODE`` or
  ``SYS`` to every GPU is a storage/in-band port even when it is some GPU's nearest: that GPU's
  own rail is missing (a warning says so);
- on a PCIe box whose only NIC hangs off another root complex, the nearest NIC is still the
  rail, with a warning that GPUDirect RDMA will be slow or off beyond ``PXB``.

A rail whose port is not ACTIVE stays the GPU's rail (so the doctor can say which GPU lost its
link) but is not given to NCCL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pipeline.collective._pci import LEVELS
from pipeline.collective.topology import RdmaDevice, Topology

_PHB = LEVELS.index("PHB")
_PXB = LEVELS.index("PXB")


@dataclass(frozen=True, kw_only=True)
class GpuRail:
    """One GPU and the RDMA device it is paired with."""

    gpu: int
    rail: str | None
    """RDMA device name (``mlx5_0``); None when the GPU has no rail of its own."""
    distance: str | None
    """``PIX`` … ``SYS`` from the GPU to ``rail`` (to its nearest device when ``rail`` is None)."""
    state: str
    """``ACTIVE`` when the rail has an active port, else the port state (``DOWN``) or
    ``missing``."""
    alternatives: tuple[str, ...]
    """Other rails at the same distance (the GPU's pair partner's rail on an 8×A100)."""

    def as_dict(self) -> dict:
        return {"gpu": self.gpu, "rail": self.rail, "distance": self.distance,
                "state": self.state, "alternatives": list(self.alternatives)}


@dataclass(frozen=True, kw_only=True)
class Rails:
    """The pairing for one node."""

    pairs: tuple[GpuRail, ...]
    compute: tuple[str, ...]
    """RDMA devices that are some GPU's rail, in GPU order."""
    storage: tuple[str, ...]
    """RDMA devices that are no GPU's rail (storage, in-band, or farther than another NIC)."""
    known: bool
    """Whether GPU→NIC distances were known; when not, every device counts as a rail."""
    warnings: tuple[str, ...]
    notes: tuple[str, ...]

    def rail_of(self, gpu: int) -> GpuRail | None:
        return next((p for p in self.pairs if p.gpu == gpu), None)


def pair_rails(topology: Topology) -> Rails:
    """Pair every GPU with its nearest RDMA device and split devices into rails and the rest."""
    devices = {d.name: d for d in topology.rdma}
    names = sorted(devices, key=natural)
    if not devices or not topology.gpus or not any(g.nic_distance for g in topology.gpus):
        notes = () if not devices or not topology.gpus else (
            "GPU↔NIC distances are unknown: every RDMA device is treated as a compute rail",)
        return Rails(pairs=(), compute=tuple(names), storage=(), known=False, warnings=(),
                     notes=notes)
    rank = {g.index: {n: LEVELS.index(lvl) for n, lvl in g.nic_distance.items() if lvl in LEVELS}
            for g in topology.gpus}
    best = {g: min(r.values()) if r else None for g, r in rank.items()}
    has_rails = any(b is not None and b <= _PHB for b in best.values())
    load: dict[str, int] = {}
    pairs, warnings = [], []
    for gpu in sorted(rank):
        near = best[gpu]
        if near is None:
            pairs.append(GpuRail(gpu=gpu, rail=None, distance=None, state="missing",
                                 alternatives=()))
            continue
        tied = sorted((n for n, r in rank[gpu].items() if r == near), key=natural)
        if has_rails and near > _PHB:
            pairs.append(GpuRail(gpu=gpu, rail=None, distance=LEVELS[near], state="missing",
                                 alternatives=()))
            continue
        # Spread GPUs over equally near rails; an active one before a down one.
        rail = min(tied, key=lambda n: (not devices[n].active_ports, load.get(n, 0), natural(n)))
        load[rail] = load.get(rail, 0) + 1
        pairs.append(GpuRail(gpu=gpu, rail=rail, distance=LEVELS[near],
                             state=_state(devices[rail]),
                             alternatives=tuple(n for n in tied if n != rail)))
    compute: list[str] = []
    for pair in pairs:
        for name in (pair.rail, *pair.alternatives):
            if name is not None and name not in compute:
                compute.append(name)
    unplaced = [n for n in names if all(n not in r for r in rank.values())]
    compute.extend(unplaced)
    storage = tuple(n for n in names if n not in compute)
    notes = []
    if unplaced:
        notes.append(f"distance to the GPUs unknown for {', '.join(unplaced)}: kept as compute "
                     "rails")
    if storage:
        notes.append(_storage_line(storage, rank))
    warnings.extend(_pair_warnings(pairs, devices, rank))
    return Rails(pairs=tuple(pairs), compute=tuple(compute), storage=storage, known=True,
                 warnings=tuple(warnings), notes=tuple(notes))


def natural(name: str) -> tuple:
    """Sort key that puts ``mlx5_2`` before ``mlx5_10``."""
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name))


def _state(device: RdmaDevice) -> str:
    if device.active_ports:
        return "ACTIVE"
    return device.ports[0].state if device.ports else "missing"


def _storage_line(storage: tuple[str, ...], rank: dict[int, dict[str, int]]) -> str:
    far = [n for n in storage if all(r.get(n, len(LEVELS)) > _PHB for r in rank.values())]
    near = [n for n in storage if n not in far]
    parts = []
    if far:
        parts.append(f"{', '.join(far)} {'is' if len(far) == 1 else 'are'} NODE/SYS to every "
                     "GPU: storage or in-band ports")
    if near:
        parts.append(f"{', '.join(near)} {'is' if len(near) == 1 else 'are'} not the nearest "
                     "RDMA device of any GPU")
    return "; ".join(parts) + "; left out of NCCL_IB_HCA"


def _pair_warnings(pairs: list[GpuRail], devices: dict[str, RdmaDevice],
                   rank: dict[int, dict[str, int]]) -> list[str]:
    out = []
    for pair in pairs:
        if pair.rail is None:
            if pair.distance is None:
                out.append(f"GPU {pair.gpu}: distance to the RDMA devices is unknown")
                continue
            nearest = sorted((n for n, r in rank[pair.gpu].items()
                              if r == LEVELS.index(pair.distance)), key=natural)
            railed = [str(p.gpu) for p in pairs if p.rail is not None]
            out.append(
                f"GPU {pair.gpu} has no rail of its own: its nearest RDMA NIC "
                f"({', '.join(nearest)}) is {pair.distance}, farther than PXB, so GPUDirect RDMA "
                f"is off for it and its traffic crosses to another GPU's rail, while GPU "
                f"{', '.join(railed)} {'has' if len(railed) == 1 else 'have'} one within PHB: "
                "a missing HCA (check `lspci | grep -i mellanox`, driver, firmware) or a board "
                "with fewer NICs than GPUs")
            continue
        if pair.distance is not None and LEVELS.index(pair.distance) > _PXB:
            out.append(f"GPU {pair.gpu}'s nearest RDMA NIC {pair.rail} is {pair.distance} "
                       "(farther than PXB): GPUDirect RDMA will be slow or off, so inter-node "
                       "traffic bounces through host memory; put GPU and NIC behind one PCIe "
                       "switch where the board allows")
    for name in dict.fromkeys(n for p in pairs for n in (p.rail, *p.alternatives) if n):
        device = devices[name]
        if device.active_ports:
            continue
        served = [p for p in pairs if name in (p.rail, *p.alternatives)]
        one = len(served) == 1
        gpus = ("GPU " if one else "GPUs ") + ", ".join(str(p.gpu) for p in served)
        spare = sorted({n for p in served for n in (p.rail, *p.alternatives)
                        if n and n != name and devices[n].active_ports}, key=natural)
        port = device.ports[0] if device.ports else None
        state = f"{port.state}, phys_state {port.phys_state}" if port else "without ports"
        where = (f"{gpus} use{'s' if one else ''} {', '.join(spare)} instead" if spare else
                 f"{gpus} {'has' if one else 'have'} no working rail of {'its' if one else 'their'}"
                 " own: the traffic crosses to another GPU's rail over NVLink/PCIe")
        out.append(f"rail {name} (nearest to {gpus}) is {state}: {where}; check the cable "
                   f"and switch port (`ibstat {name}`)")
    return out
