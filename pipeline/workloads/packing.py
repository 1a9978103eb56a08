"""Byte-level tokens packed into fixed-length sequences that keep document boundaries (Ray Data
worker; numpy, and pyarrow to read a file; picklable functions).

A document's tokens are its UTF-8 bytes (0-255) followed by :data:`EOD` (256), so the vocabulary
has :data:`VOCAB_SIZE` = 257 entries and needs no training. A batch of documents is one token
stream, cut into rows of ``seq_len + 1`` tokens that overlap by one (row r holds stream
positions ``[r * seq_len, (r + 1) * seq_len]``), so every token of the stream but the first is
a target exactly once. Each row carries, beside ``tokens``, the index of the document each
position belongs to, counted from 0 within the row::

    stream   a b c EOD  d e EOD  f g h i ...          seq_len = 4
    row 0    a b c EOD d        doc 0 0 0 0 1
    row 1    d e EOD f g        doc 0 0 0 1 1

Training reads ``tokens[:-1]`` as inputs and ``tokens[1:]`` as targets; a target whose document
differs from its input position's (``doc[1:] != doc[:-1]``: the first token of a document,
predicted from the previous document's EOD) is masked out of the loss, and attention is
block-diagonal, so nothing is predicted from, or attends to, another document.

What is dropped: the stream's tail after its last full row, fewer than ``seq_len`` targets per
packed unit (a batch of documents, or one file with :func:`pack_files`: packing never spans
them). The rows are a function of each unit's documents in their order.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

EOD = 256  # ends every document
VOCAB_SIZE = 257


def encode(text: str) -> np.ndarray:
    """One document's tokens: its UTF-8 bytes, then :data:`EOD` (int64)."""
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return np.append(data.astype(np.int64), EOD)


def decode(tokens: Sequence[int] | np.ndarray) -> str:
    """Text of tokens, with ``<EOD>`` for the end-of-document token (invalid UTF-8, which a
    sequence cut mid-character holds, is replaced)."""
    out, chunk = [], bytearray()
    for t in np.asarray(tokens).tolist():
        if t == EOD:
            out.append(chunk.decode("utf-8", errors="replace") + "<EOD>")
            chunk = bytearray()
        else:
            chunk.append(t)
    out.append(chunk.decode("utf-8", errors="replace"))
    return "".join(out)


def token_stream(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """The documents' tokens end to end (int64) and each token's document index (int64)."""
    raw = [t.encode("utf-8") for t in texts]
    lengths = np.fromiter((len(b) + 1 for b in raw), dtype=np.int64, count=len(raw))
    total = int(lengths.sum())
    tokens = np.full(total, EOD, dtype=np.int64)
    ends = np.cumsum(lengths) - 1  # where each document's EOD goes
    is_byte = np.ones(total, dtype=bool)
    is_byte[ends] = False
    tokens[is_byte] = np.frombuffer(b"".join(raw), dtype=np.uint8)
    docs = np.repeat(np.arange(len(raw), dtype=np.int64), lengths)
    return tokens, docs


def pack(tokens: np.ndarray, docs: np.ndarray, seq_len: int) -> dict[str, np.ndarray]:
    """Rows ``tokens`` (int64) and ``doc`` (int32), both ``(rows, seq_len + 1)``, cut from a
    token stream and its document indices; see the module's docstring."""
    if seq_len < 1:
        raise ValueError(f"seq_len ({seq_len}) must be >= 1")
    rows = max(0, (len(tokens) - 1) // seq_len)
    index = np.arange(rows, dtype=np.int64)[:, None] * seq_len + np.arange(seq_len + 1)
    doc = docs[index]
    doc = doc - doc[:, :1]  # counted from 0 within each row
    return {"tokens": tokens[index], "doc": doc.astype(np.int32)}


def pack_batch(batch: dict[str, np.ndarray], *, seq_len: int,
               column: str = "text") -> dict[str, np.ndarray]:
    """A ``map_batches`` function: a batch of documents (``column`` holds strings) in, packed
    rows ``tokens`` and ``doc`` out. A batch too short for one row gives no rows."""
    return pack(*token_stream([str(t) for t in batch[column]]), seq_len)


def pack_files(batch: dict[str, np.ndarray], *, seq_len: int,
               column: str = "text") -> dict[str, np.ndarray]:
    """A ``map_batches`` function over file paths (``batch["path"]``): each parquet file's
    documents, read here, are packed on their own, so the rows depend on the files alone and
    not on how a reader would cut them into blocks."""
    import pyarrow.parquet as pq

    parts = [pack_batch({column: pq.read_table(path, columns=[column]).column(column)
                         .to_numpy(zero_copy_only=False)}, seq_len=seq_len, column=column)
             for path in batch["path"]]
    if not parts:
        return pack(np.empty(0, np.int64), np.empty(0, np.int64), seq_len)
    return {name: np.concatenate([part[name] for part in parts]) for name in ("tokens", "doc")}


def target_mask(doc: np.ndarray) -> np.ndarray:
    """Which targets of packed rows count: ``doc[..., 1:] == doc[..., :-1]`` (numpy twin of the
    task's mask, for tests and inspection)."""
    return doc[..., 1:] == doc[..., :-1]
