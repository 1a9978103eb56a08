"""Flatten a host batch into its array leaves and rebuild the same structure around new leaves.

Ray Data's ``iter_batches(batch_format="numpy")`` yields ``dict[str, np.ndarray]``; users' own
loaders yield tuples or nested dicts of numpy arrays or CPU tensors. The feeder moves only the
numeric leaves; everything else (string or object columns such as sample ids, Python scalars,
tensors already on a GPU) passes through untouched, in place, so the batch keeps its shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from pipeline.transfer.rows import Rows

# numpy kinds torch can hold: bool, signed, unsigned, float, complex.
_NUMERIC_KINDS = frozenset("biufc")


@dataclass(frozen=True)
class Leaf:
    """One array to move: its dotted path in the batch (e.g. ``inputs.image``) and the value."""

    path: str
    value: np.ndarray | torch.Tensor | Rows


def is_movable(value: Any) -> bool:
    """True for host arrays (and rows to gather) the feeder copies to the device."""
    if isinstance(value, Rows):
        return True
    if isinstance(value, np.ndarray):
        return value.dtype.kind in _NUMERIC_KINDS
    if isinstance(value, torch.Tensor):
        return value.device.type == "cpu"
    return False


def flatten(batch: Any) -> tuple[list[Leaf], Any]:
    """The movable leaves in a stable order and a skeleton for :func:`unflatten`.

    The skeleton is the batch with each movable leaf replaced by its index in the leaf list.
    """
    if type(batch) is dict and all(map(is_movable, batch.values())):
        # Ray Data's batches: a flat dict of arrays, the one shape worth a short cut
        return [Leaf(str(k), v) for k, v in batch.items()], _Flat(tuple(batch))
    leaves: list[Leaf] = []
    skeleton = _flatten(batch, "", leaves)
    return leaves, skeleton


def unflatten(skeleton: Any, values: list[Any]) -> Any:
    """Rebuild the batch structure from ``flatten``'s skeleton with ``values`` as the leaves."""
    if type(skeleton) is _Flat:
        return dict(zip(skeleton.keys, values, strict=True))
    if isinstance(skeleton, _Slot):
        return values[skeleton.index]
    if isinstance(skeleton, dict):
        return {k: unflatten(v, values) for k, v in skeleton.items()}
    if isinstance(skeleton, tuple):
        items = [unflatten(v, values) for v in skeleton]
        if hasattr(skeleton, "_fields"):  # namedtuple
            return type(skeleton)(*items)
        return tuple(items)
    if isinstance(skeleton, list):
        return [unflatten(v, values) for v in skeleton]
    return skeleton


@dataclass(frozen=True)
class _Slot:
    index: int


@dataclass(frozen=True)
class _Flat:
    keys: tuple[Any, ...]


def _flatten(node: Any, path: str, leaves: list[Leaf]) -> Any:
    if is_movable(node):
        leaves.append(Leaf(path or "0", node))
        return _Slot(len(leaves) - 1)
    if isinstance(node, Mapping):
        return {k: _flatten(v, _join(path, k), leaves) for k, v in node.items()}
    if isinstance(node, tuple):
        items = [_flatten(v, _join(path, i), leaves) for i, v in enumerate(node)]
        return type(node)(*items) if hasattr(node, "_fields") else tuple(items)
    if isinstance(node, list):
        return [_flatten(v, _join(path, i), leaves) for i, v in enumerate(node)]
    return node


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)
