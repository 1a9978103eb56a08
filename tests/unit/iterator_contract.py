"""The contract every iterator stage passes (order, completeness, values, errors, shutdown).

A stage is anything that wraps an iterable of batches and yields batches: the transfer feeder,
prefetchers, collators, and each stage of the feed chain (record into the cache, skip resumed
ids, the composed chain). Subclass :class:`IteratorContract` in a ``Test*`` class and implement
``build(source)``; pytest then runs every ``test_*`` method below against the stage. A stage
that takes only Ray Data's numpy batches (equal-length columns with an ``id``) sets
``columns_only``: it gets those, with every dtype, and no nested or tuple batches. Methods use
no fixtures, so a self-test can call them on a deliberately broken stage and expect them to fail
(a contract that cannot fail protects nothing).

Batches are dicts / tuples / lists of numpy arrays with distinct, awkward values per batch
(NaN, -0.0, extremes, non-contiguous and read-only arrays, as Ray Data hands over), so "bit-equal"
catches dtype changes, rounding and buffer aliasing.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

try:
    import torch
except ImportError:  # the contract itself needs only numpy
    torch = None


# ------------------------------------------------------------------------------- batches
def simple_batch(i: int, rows: int = 4) -> dict[str, Any]:
    """``{"x": float32 rows×3, "index": int64 rows}`` tagged with ``i``."""
    x = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3) + 1000 * i
    return {"x": x, "index": np.full(rows, i, dtype=np.int64)}


def nested_batch(i: int) -> dict[str, Any]:
    """Nested dict/tuple/list with a string column and a Python value passed through."""
    rng = np.random.default_rng(i)
    return {
        "inputs": {"image": rng.integers(0, 256, (2, 3, 4, 4), dtype=np.uint8),
                   "mask": rng.random((2, 4)) > 0.5},
        "target": (rng.standard_normal(2), np.array([i, -i], dtype=np.int32)),
        "extra": [np.float16(i) * np.ones(3, dtype=np.float16)],
        "id": np.array([f"s{i}-0", f"s{i}-1"]),
        "epoch": 7,
    }


def mixed_dtype_batch(i: int) -> dict[str, Any]:
    """Every common dtype, special floats, a non-contiguous and a read-only array."""
    rng = np.random.default_rng(100 + i)
    floats = rng.standard_normal(8).astype(np.float64)
    floats[:3] = [np.nan, -0.0, np.inf]
    readonly = rng.integers(-5, 5, 6, dtype=np.int16)
    readonly.flags.writeable = False
    batch = {
        "bool": rng.random(5) > 0.5,
        "uint8": rng.integers(0, 256, 7, dtype=np.uint8),
        "int8": np.array([-128, 127, i % 128], dtype=np.int8),
        "int16_readonly": readonly,
        "int32": rng.integers(-2**31, 2**31 - 1, 4, dtype=np.int32),
        "int64": np.array([-2**63, 2**63 - 1, i], dtype=np.int64),
        "float16": floats.astype(np.float16),
        "float32": floats.astype(np.float32),
        "float64": floats,
        "complex64": (floats[3:] + 1j * i).astype(np.complex64),
        "noncontiguous": np.arange(24, dtype=np.float32).reshape(4, 6).T[::2] + i,
        "scalar": np.array(i + 0.5),
    }
    return batch


def column_batch(i: int, rows: int = 4) -> dict[str, Any]:
    """:func:`simple_batch` as Ray Data hands a batch over: columns of one length, with ids."""
    return simple_batch(i, rows) | {"id": np.arange(i * rows, (i + 1) * rows, dtype=np.int64)}


def mixed_column_batch(i: int) -> dict[str, Any]:
    """:func:`mixed_dtype_batch`'s dtypes and special values as columns of one length (an image
    column too), with ids."""
    rows = 6
    rng = np.random.default_rng(200 + i)
    floats = rng.standard_normal(rows)
    floats[:3] = [np.nan, -0.0, np.inf]
    readonly = rng.integers(-5, 5, rows, dtype=np.int16)
    readonly.flags.writeable = False
    return {
        "id": np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
        "image": rng.integers(0, 256, (rows, 3, 4, 4), dtype=np.uint8),
        "bool": rng.random(rows) > 0.5,
        "int8": np.array([-128, 127, i % 128, 0, 1, -1], dtype=np.int8),
        "int16_readonly": readonly,
        "int32": rng.integers(-2**31, 2**31 - 1, rows, dtype=np.int32),
        "int64": np.array([-2**63, 2**63 - 1, i, 0, 1, -1], dtype=np.int64),
        "float16": floats.astype(np.float16),
        "float32": floats.astype(np.float32),
        "float64": floats,
        "noncontiguous": np.arange(rows * 8, dtype=np.float32).reshape(8, rows).T[:, ::2] + i,
    }


def counting_source(make, n: int, log: dict[str, Any]) -> Iterator[Any]:
    """A generator source that records how far it was read and whether it was closed."""
    log.update(produced=0, closed=False)
    try:
        for i in range(n):
            log["produced"] = i + 1
            yield make(i)
    finally:
        log["closed"] = True


def failing_source(n_good: int, make=simple_batch) -> Iterator[Any]:
    """Yields ``n_good`` batches, then raises ``ValueError`` from this function."""
    for i in range(n_good):
        yield make(i)
    raise ValueError(f"source broke after {n_good} batches")


# ------------------------------------------------------------------------------- comparison
def assert_same_batch(expected: Any, got: Any, to_host, path: str = "batch") -> None:
    """Same structure and bit-equal leaves (dtype, shape and bytes) — or say where not."""
    if isinstance(expected, dict):
        assert isinstance(got, dict), f"{path}: expected a dict, got {type(got).__name__}"
        assert list(got) == list(expected), f"{path}: keys {list(got)} != {list(expected)}"
        for key in expected:
            assert_same_batch(expected[key], got[key], to_host, f"{path}.{key}")
    elif isinstance(expected, (tuple, list)):
        assert type(got) is type(expected), f"{path}: {type(got).__name__} is not " \
                                            f"{type(expected).__name__}"
        assert len(got) == len(expected), f"{path}: length {len(got)} != {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            assert_same_batch(e, g, to_host, f"{path}[{i}]")
    elif isinstance(expected, np.ndarray) and expected.dtype.kind in "biufc":
        host = to_host(got)
        assert isinstance(host, np.ndarray), f"{path}: {type(got).__name__} is not an array"
        assert host.dtype == expected.dtype, f"{path}: dtype {host.dtype} != {expected.dtype}"
        assert host.shape == expected.shape, f"{path}: shape {host.shape} != {expected.shape}"
        assert np.ascontiguousarray(host).tobytes() == np.ascontiguousarray(expected).tobytes(), \
            f"{path}: values differ (first: {host.ravel()[:4]} vs {expected.ravel()[:4]})"
    elif isinstance(expected, np.ndarray):
        assert isinstance(got, np.ndarray) and np.array_equal(got, expected), \
            f"{path}: pass-through array changed"
    else:
        assert got == expected, f"{path}: {got!r} != {expected!r}"


def default_to_host(value: Any) -> Any:
    """Tensor (any device) → numpy; arrays unchanged."""
    if torch is not None and isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return value


# ------------------------------------------------------------------------------- contract
class IteratorContract:
    """Mix into a ``Test*`` class; implement :meth:`build`."""

    #: Text a producer error must carry so the user knows which stage raised (e.g. the name).
    where_hint: str = ""
    #: Stages with ``state_dict()``/``load_state_dict()`` set this to run the resume check.
    supports_state: bool = False
    #: How long a stage's thread may take to exit after the consumer left.
    thread_exit_timeout_s: float = 5.0
    #: The stage takes only Ray Data's numpy batches (the feed chain's stages).
    columns_only: bool = False

    def batch(self, i: int) -> Any:
        return column_batch(i) if self.columns_only else simple_batch(i)

    def mixed(self, i: int) -> Any:
        return mixed_column_batch(i) if self.columns_only else mixed_dtype_batch(i)

    def build(self, source: Iterable[Any]) -> Iterable[Any]:
        raise NotImplementedError

    def to_host(self, value: Any) -> Any:
        return default_to_host(value)

    def _collect(self, source: Iterable[Any]) -> list[Any]:
        return list(self.build(source))

    def test_order_and_completeness(self):
        out = self._collect(self.batch(i) for i in range(50))
        indices = [int(self.to_host(b["index"])[0]) for b in out]
        assert indices == list(range(50)), f"order/completeness broken: {indices}"

    def test_empty_source(self):
        assert self._collect(iter(())) == []

    def test_values_bit_equal_and_stay_valid_after_iteration_moves_on(self):
        # Holding every batch, as a user logging them would, catches reuse of shared buffers.
        held = []
        for i, batch in enumerate(self.build(self.mixed(i) for i in range(12))):
            assert_same_batch(self.mixed(i), batch, self.to_host, f"batch {i} (fresh)")
            held.append(batch)
        assert len(held) == 12
        for i, batch in enumerate(held):
            assert_same_batch(self.mixed(i), batch, self.to_host, f"batch {i} (held)")

    def test_nested_structures(self):
        if self.columns_only:
            pytest.skip("the stage takes Ray Data's numpy batches (columns) only")
        out = self._collect(nested_batch(i) for i in range(6))
        assert len(out) == 6
        for i, batch in enumerate(out):
            assert_same_batch(nested_batch(i), batch, self.to_host, f"batch {i}")

    def test_tuple_batches(self):
        if self.columns_only:
            pytest.skip("the stage takes Ray Data's numpy batches (columns) only")
        source = ((simple_batch(i)["x"], simple_batch(i)["index"]) for i in range(5))
        out = self._collect(source)
        for i, batch in enumerate(out):
            expected = (simple_batch(i)["x"], simple_batch(i)["index"])
            assert_same_batch(expected, batch, self.to_host, f"batch {i}")

    def test_producer_exception_surfaces_with_where_it_happened(self):
        got = []
        with pytest.raises(ValueError, match="source broke after 3 batches") as info:
            for batch in self.build(failing_source(3, self.batch)):
                got.append(int(self.to_host(batch["index"])[0]))
        assert got == [0, 1, 2], "batches before the error must still arrive, in order"
        text = "".join(traceback.format_exception(info.value))
        assert "failing_source" in text, "the traceback must show the frame that raised"
        assert self.where_hint in text, f"the error must say {self.where_hint!r}:\n{text}"

    def test_early_break_frees_thread_and_closes_source(self):
        before = set(threading.enumerate())
        log: dict[str, Any] = {}
        for i, _ in enumerate(self.build(counting_source(self.batch, 1000, log))):
            if i == 2:
                break
        _assert_no_new_threads(before, self.thread_exit_timeout_s)
        assert log["produced"] < 1000, "the stage read the whole source after an early break"
        assert log["closed"], "breaking out must close the source (its finally must run)"

    def test_dropping_a_started_iterator_frees_thread(self):
        before = set(threading.enumerate())
        log: dict[str, Any] = {}
        stage = self.build(counting_source(self.batch, 1000, log))
        it = iter(stage)
        next(it)
        del it, stage
        _assert_no_new_threads(before, self.thread_exit_timeout_s)
        assert log["closed"], "dropping the stage must close the source"

    def test_state_save_and_resume(self):
        if not self.supports_state:
            pytest.skip("stage keeps no state; resuming is the source's job")
        stage = self.build(self.batch(i) for i in range(20))
        it = iter(stage)
        head = [next(it) for _ in range(7)]
        state = stage.state_dict()
        resumed = self.build(self.batch(i) for i in range(20))
        resumed.load_state_dict(state)
        tail = list(resumed)
        indices = [int(self.to_host(b["index"])[0]) for b in head + tail]
        assert indices == list(range(20)), f"resume lost or repeated batches: {indices}"


def _assert_no_new_threads(before: set[threading.Thread], timeout_s: float) -> None:
    new = [t for t in threading.enumerate() if t not in before]
    for thread in new:
        thread.join(timeout=timeout_s)  # bounded: a stage that never stops its thread fails here
    alive = [t.name for t in new if t.is_alive()]
    assert not alive, f"threads still running after the consumer left: {alive}"
