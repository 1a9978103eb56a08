"""Exactly-once accounting of an epoch: which training ids were delivered, how often.

Every sample has a stable id, so the driver can check each epoch against the training split:
delivered once (good), more than once (duplicated), never (lost), dropped on purpose
(quarantined, or the ``streaming_split(equal=True)`` remainder: at most ``world - 1`` rows so
every rank runs the same number of steps). Pure function; runs on the driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


def account_epoch(expected: np.ndarray, delivered: Iterable[np.ndarray], *,
                  quarantined: Iterable[int], world_size: int) -> dict[str, Any]:
    """Counts for one epoch; ``lost`` and ``duplicated`` must both be 0 for exactly-once."""
    got = np.concatenate([np.asarray(d, np.int64) for d in delivered] or [np.empty(0, np.int64)])
    ids, counts = np.unique(got, return_counts=True)
    expected = np.unique(np.asarray(expected, np.int64))
    unknown = np.setdiff1d(ids, expected)
    bad = np.intersect1d(np.fromiter(quarantined, np.int64), expected)
    missing = np.setdiff1d(np.setdiff1d(expected, ids), bad)
    remainder = missing if len(missing) < world_size else np.empty(0, np.int64)
    lost = np.setdiff1d(missing, remainder)
    return {
        "expected": int(len(expected)),
        "delivered": int(len(got)),
        "unique": int(len(ids)),
        "duplicated": int((counts > 1).sum()),
        "quarantined": int(len(bad)),
        "split_remainder": remainder.tolist(),
        "lost": int(len(lost)),
        "lost_ids": lost[:20].tolist(),
        "unknown": int(len(unknown)),
    }
