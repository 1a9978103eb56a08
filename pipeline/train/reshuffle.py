"""Every replayed epoch a fresh permutation of the cached rows across the ranks (Train worker;
no Ray).

After the recorded epoch each rank's cache is a set of ``.npy`` files. The ranks swap
:class:`Shard` descriptions (host, rows, files), and every later epoch deals the union anew,
as ``DistributedSampler(shuffle=True)`` deals indices::

    rows:     rank 0's [0, n)   rank 1's [n, 2n)   ...      (the group's shards, end to end)
    epoch e:  perm = permutation(G·n, seed=(data.seed, e));  the group's k-th rank trains perm[k::G]

``data.reshuffle`` picks the group: ``global`` (every rank), ``node`` (the ranks on this
machine), ``rank`` (this rank alone: its own rows, reordered). A peer's rows are read from its
files mapped read-only (shared memory, or the page cache of a disk cache): no copy until the
batch's gather, which is the one copy a permuted batch needs anyway. So a group spans one
machine. With ``global`` and ranks on several machines, a cached row would have to cross the
network every epoch; the training set is then not cached (:func:`global_needs_streaming`) and
every epoch streams a fresh permutation from Ray Data
(:class:`pipeline.data.udf.reader.EpochManifest`), which moves the encoded files instead, as a
``DistributedSampler`` job reading shared storage does. ``node`` keeps the cache and never
moves a row between machines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline.transfer.rows import Rows

Batch = dict[str, np.ndarray]
SCOPES = ("global", "node", "rank")


@dataclass(frozen=True)
class Shard:
    """What one rank says of its complete cache (sent to every rank; plain values)."""

    rank: int
    host: str
    rows: int
    files: dict[str, str] = field(default_factory=dict)  # column → .npy; empty: not in files


@dataclass(frozen=True)
class Group:
    """The ranks whose cached rows this rank's replayed epochs deal, and why those."""

    ranks: tuple[int, ...]
    reason: str

    def position(self, rank: int) -> int:
        return self.ranks.index(rank)


def global_needs_streaming(scope: str, hosts: Sequence[str]) -> str | None:
    """Why a cache cannot serve ``scope`` for ranks on ``hosts`` (one per rank), or None."""
    machines = len(set(hosts))
    if scope == "global" and machines > 1:
        return (f"data.reshuffle: global across {machines} machines: cached rows would cross the "
                f"network every epoch, so every epoch streams a fresh permutation instead "
                f"(data.reshuffle: node keeps the cache and deals rows within each machine)")
    return None


def group_of(scope: str, shards: Sequence[Shard], rank: int) -> Group:
    """The group of ``rank`` (``shards`` in rank order, the same list on every rank, so every
    member of a group finds the same group). A group needs every member's rows in files and
    the same row count on each (DDP steps in lockstep); otherwise each rank keeps its own."""
    if scope not in SCOPES:
        raise ValueError(f"data.reshuffle ({scope!r}) must be one of {', '.join(SCOPES)}")
    me = shards[rank]
    if scope == "rank" or len(shards) == 1:
        return Group((rank,), f"data.reshuffle: {scope}" if scope == "rank"
                     else "one rank: its own rows, a new order every epoch")
    members = tuple(s.rank for s in shards if scope == "global" or s.host == me.host)
    unshared = [r for r in members if not shards[r].files]
    if unshared:
        return Group((rank,), f"rank(s) {unshared} keep their cache in process memory (no "
                              f"/dev/shm): each rank replays its own rows, reordered")
    counts = sorted({shards[r].rows for r in members})
    if len(counts) > 1:
        return Group((rank,), f"the ranks cached different row counts ({counts}): each rank "
                              f"replays its own rows, reordered")
    where = "every rank" if scope == "global" else f"the {len(members)} ranks on {me.host}"
    return Group(members, f"data.reshuffle: {scope}: {where} deal their cached rows anew "
                          f"every epoch")


def epoch_order(counts: Sequence[int], position: int, seed: int, epoch: int) -> np.ndarray:
    """The group's row indices (its shards end to end, ``counts`` rows each) that the member at
    ``position`` trains in ``epoch``, in training order. The members together train every row
    once; any two epochs differ."""
    total, size = int(np.sum(counts)), len(counts)
    perm = np.random.default_rng([seed, epoch]).permutation(total)
    return perm[position::size]


def open_shard(shard: Shard) -> Batch:
    """A peer's cached columns, mapped read-only (no copy)."""
    return {key: np.load(path, mmap_mode="r")[: shard.rows] for key, path in shard.files.items()}


def replay(columns: Sequence[Batch], order: np.ndarray, *,
           batch_size: int) -> Iterator[dict[str, Rows]]:
    """Batches of the rows ``order`` names in ``columns`` (the group's shards, end to end), each
    field a :class:`~pipeline.transfer.rows.Rows`: the gather runs once, in the feeder, straight
    into its staging slot. Each batch reads its rows in index order (sequential reads); which
    rows share a batch is the permutation's."""
    counts = [len(next(iter(c.values()))) for c in columns]
    offsets = np.concatenate([[0], np.cumsum(counts)])
    for start in range(0, len(order), batch_size):
        idx = np.sort(order[start:start + batch_size])
        cuts = np.searchsorted(idx, offsets)  # where each shard's rows begin in idx
        parts = [(owner, idx[a:b] - offsets[owner])
                 for owner, (a, b) in enumerate(zip(cuts[:-1], cuts[1:], strict=True)) if a < b]
        yield {key: Rows([(columns[owner][key], local) for owner, local in parts])
               for key in columns[0]}
