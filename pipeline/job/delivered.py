"""The sample ids each epoch delivered, kept as epochs end so that every epoch is accounted.

``delivered.npz`` is written when a run ends. A run that is stopped (or fails) never gets
there, so each finished epoch is also kept on its own in ``RUN_DIR/delivered/e<N>.npz`` as it
ends; the rerun that resumes the run merges the epochs it did not train into its
``delivered.npz`` and its exactly-once accounting. An epoch the rerun trains again (the stop
came before its checkpoint) is the rerun's. Driver side; pure numpy.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np

#: ``RUN_DIR/delivered/``: one file per finished epoch until the run succeeds.
EPOCHS_DIR = "delivered"
BEFORE_RESTART = "before_restart"


def save_epoch(folder: Path, epoch: int, ranks: dict[int, Any], before_restart: Any) -> None:
    """Keep one finished epoch: every rank's ids, and the ids that epoch committed before a
    restart (None when it did not restart). Written whole or not at all."""
    arrays = {f"rank{r}": np.asarray(ids, np.int64) for r, ids in ranks.items()}
    if before_restart is not None:
        arrays[BEFORE_RESTART] = np.asarray(before_restart, np.int64)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".e{epoch}.npz"
    np.savez(partial, **arrays)
    os.replace(partial, folder / f"e{epoch}.npz")


def earlier_epochs(folder: Path, epochs: int) -> dict[int, dict[str, np.ndarray]]:
    """The epochs (1..``epochs``) earlier runs into this run directory finished."""
    found = {}
    for path in folder.glob("e*.npz"):
        match = re.fullmatch(r"e(\d+)\.npz", path.name)
        if match and 1 <= int(match[1]) <= epochs:
            with np.load(path) as arrays:
                found[int(match[1])] = {k: arrays[k] for k in arrays.files}
    return found


def merge_earlier(folder: Path, epochs: int, delivered: dict[int, dict[int, Any]],
                  before_restart: dict[int, Any]) -> tuple[dict[int, dict[int, Any]],
                                                             dict[int, Any]]:
    """This run's ids per epoch and rank, and per epoch before a restart, completed with the
    epochs only earlier runs finished."""
    delivered, before_restart = dict(delivered), dict(before_restart)
    for epoch, arrays in earlier_epochs(folder, epochs).items():
        if epoch in delivered:
            continue
        delivered[epoch] = {int(k.removeprefix("rank")): v for k, v in arrays.items()
                            if k.startswith("rank")}
        if BEFORE_RESTART in arrays:
            before_restart[epoch] = arrays[BEFORE_RESTART]
    return dict(sorted(delivered.items())), before_restart


def write_delivered(path: Path, delivered: dict[int, dict[int, Any]],
                    before_restart: dict[int, Any]) -> None:
    """Every rank's sample ids per epoch, in training order (``e1_rank0``, ...), and the ids an
    epoch committed before a restart (``e1_before_restart``): the run's data order, for audits
    and for comparing runs."""
    arrays = {f"e{e}_rank{r}": np.asarray(ids, np.int64)
              for e, ranks in delivered.items() for r, ids in ranks.items()}
    arrays |= {f"e{e}_{BEFORE_RESTART}": np.asarray(ids, np.int64)
               for e, ids in before_restart.items()}
    np.savez_compressed(path, **arrays)


def discard(folder: Path) -> None:
    """The per-epoch files, once ``delivered.npz`` of a finished run holds them all."""
    if folder.exists():
        shutil.rmtree(folder)
