"""Deterministic train/validation split by sample id.

A sample's side depends only on (seed, id), so the split is the same on every machine, in every
epoch and after a restart, and adding files never moves existing samples across the split.
"""

from __future__ import annotations

import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: a well-spread 64-bit hash of each id."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def validation_mask(ids: np.ndarray, val_fraction: float, seed: int) -> np.ndarray:
    """True for ids that belong to the validation split."""
    if val_fraction <= 0:
        return np.zeros(len(ids), dtype=bool)
    salt = _mix(np.array([seed], np.uint64))
    keys = _mix(np.asarray(ids, dtype=np.int64).astype(np.uint64) ^ salt)
    unit = (keys >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return unit < val_fraction
