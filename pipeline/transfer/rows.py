"""Rows gathered straight into the feeder's staging slot: a replayed batch's one host copy.

A replayed epoch deals cached rows anew (:mod:`pipeline.train.reshuffle`). Gathering them into
a batch array and then copying that array into staging would be two host copies. A :class:`Rows`
field is the gather's plan instead: the feeder's producer thread runs it with the staging slot
as its output, so every byte is read once from the cache and written once into staging, pinned
on CUDA. Anything else that reads a ``Rows`` (``np.asarray``, a filter) gets an array of its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class Rows:
    """One batch field: ``index`` rows of each ``source`` array, end to end (read-only plan)."""

    __slots__ = ("parts", "shape", "dtype")

    def __init__(self, parts: Sequence[tuple[np.ndarray, np.ndarray]]):
        if not parts:
            raise ValueError("Rows needs at least one (source, index) part")
        first = parts[0][0]
        self.parts = tuple(parts)
        self.dtype = first.dtype
        self.shape = (sum(len(index) for _, index in self.parts), *first.shape[1:])

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def fill(self, out: np.ndarray) -> None:
        """Gather the rows into ``out`` (shape ``self.shape``, dtype ``self.dtype``)."""
        at = 0
        for source, index in self.parts:
            n = len(index)
            # mode="clip": indices are in range, and "raise" would gather into a buffer first
            np.take(source, index, axis=0, out=out[at:at + n], mode="clip")
            at += n

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        out = np.empty(self.shape, self.dtype)
        self.fill(out)
        return out if dtype is None else out.astype(dtype, copy=False)

    def __repr__(self) -> str:
        return f"Rows(shape={self.shape}, dtype={self.dtype}, parts={len(self.parts)})"
