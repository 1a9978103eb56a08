"""The feeder's moving parts while it iterates: a producer thread, two queues, shutdown.

::

    source ──next()──► producer thread ────────────────────────► ready queue (≤ depth + 1)
                        1 host copy: arrays → slot buffers (pool)        │
                        device copy on the copy stream, event "done"     ▼
    free slots ◄──────────────────────────────────── consumer next(): wait_event, record_stream

The producer takes a slot from ``free`` (ring of depth + 1), refills it once its previous copy is
done, and puts the batch on ``ready``. The consumer returns the slot to ``free`` as soon as its
stream is ordered after the copy, so ``wait_event`` always sees the record for *its* batch.
Every wait polls with a short timeout and checks ``stop``; the consumer's wait is bounded by
``timeout_s`` (a stall watchdog). Errors in the thread travel to the consumer with where they
happened. Nothing in here holds the public feeder object, so dropping the feeder closes this.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from pipeline.transfer._device_ops import CpuOps, CudaOps
from pipeline.transfer._host_copy import HostCopier
from pipeline.transfer._tree import Leaf, flatten, unflatten
from pipeline.transfer.normalize import Uint8Normalize
from pipeline.transfer.rows import Rows
from pipeline.transfer.staging import Slot, Staged, StagingPool
from pipeline.transfer.stats import TransferStats

logger = logging.getLogger(__name__)

_POLL_S = 0.1
# Our own waits notice ``stop`` within _POLL_S; only a call into the source can block longer.
_JOIN_TIMEOUT_S = 2.0
END = object()


@dataclass
class _Ready:
    slot: Slot
    batch: Any
    tensors: list[torch.Tensor]


@dataclass
class _Failed:
    exc: BaseException
    where: str


class Runtime:
    """One pass over ``source`` (Train worker; not picklable). Built when iteration starts."""

    def __init__(self, source: Any, *, ops: CpuOps | CudaOps, depth: int,
                 pin_memory: bool | Literal["auto"], min_pin_bytes: int,
                 normalize: dict[str, Uint8Normalize], timeout_s: float, copy_threads: int,
                 stats: TransferStats, lock: threading.Lock, name: str):
        self._doing: tuple[Any, ...] = ("starting",)
        self._copier = HostCopier(copy_threads, timeout_s, name)
        self._ops = ops
        self._normalize = normalize
        self._timeout_s = timeout_s
        self._stats = stats
        self._lock = lock
        self._name = name
        self._pool = StagingPool(depth + 1, allocate=ops.allocate, pin_memory=pin_memory,
                                 device_type=ops.device.type, min_pin_bytes=min_pin_bytes,
                                 stats=stats, lock=lock)
        # C queues (SimpleQueue): a put never blocks and a get is a few hundred nanoseconds.
        # The ring bounds both: the producer stages a batch only into a free slot, so at most
        # depth + 1 batches are ever ready, the same bound as a ready queue of depth plus the
        # batch the producer staged and holds.
        self._free: queue.SimpleQueue[Slot] = queue.SimpleQueue()
        for slot in self._pool.slots:
            self._free.put(slot)
        self._ready: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._stop = threading.Event()
        self._closed = False
        self._stalled = False
        self._constants: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._thread = threading.Thread(target=self._produce, args=(source,), name=name,
                                        daemon=True)
        self._thread.start()

    # ----------------------------------------------------------------- consumer side
    def next_batch(self) -> Any:
        """The next device batch, or ``END``; re-raises the producer's error with its place."""
        started = time.perf_counter()
        try:
            item = self._ready.get_nowait()  # the steady state: the producer is ahead
        except queue.Empty:
            item = self._wait_ready()
        waited = time.perf_counter() - started
        if isinstance(item, _Failed):
            _reraise(item, self._name)
        if item is not END:
            self._ops.hand_over(item.slot, item.tensors)
            self._free.put(item.slot)
        with self._lock:
            self._stats.consumer_wait_s += waited
            self._stats.batches += item is not END
        return END if item is END else item.batch

    def _wait_ready(self) -> Any:
        deadline = time.monotonic() + self._timeout_s
        while True:
            remaining = deadline - time.monotonic()
            try:
                return self._ready.get(timeout=max(min(_POLL_S, remaining), 0.0))
            except queue.Empty:
                if not self._thread.is_alive() and self._ready.empty():
                    raise RuntimeError(
                        f"{self._name}: producer thread ended without a result while "
                        f"{self.where}; this is a bug in pipeline.transfer") from None
                if remaining <= 0:
                    self._stalled = True  # close() will not wait for a thread stuck upstream
                    raise TimeoutError(
                        f"{self._name}: no batch for {self._timeout_s:g} s while the producer "
                        f"was {self.where}; the source is stalled or too slow (check the data "
                        "stage), or raise timeout_s") from None

    def close(self) -> None:
        """Stop the producer, drop queued batches, join the thread (bounded). Idempotent."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self._drain()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=0.0 if self._stalled else _JOIN_TIMEOUT_S)
            if self._thread.is_alive():
                logger.warning("%s: producer thread is still %s; it exits when that call "
                               "returns", self._name, self.where)
        self._drain()

    @property
    def where(self) -> str:
        """What the producer is doing (formatted only when asked: errors and warnings)."""
        what, *args = self._doing
        return what.format(*args)

    @property
    def thread_alive(self) -> bool:
        return self._thread.is_alive()

    def _drain(self) -> None:
        while True:
            try:
                self._ready.get_nowait()
            except queue.Empty:
                return

    # ----------------------------------------------------------------- producer side
    def _produce(self, source: Any) -> None:
        iterator = None
        final: Any = END
        try:
            self._ops.start_thread()
            iterator = iter(source)
            with torch.no_grad():
                self._loop(iterator)
        except BaseException as exc:  # noqa: BLE001 - every error travels to the consumer
            final = _Failed(exc, self.where)
        try:
            self._doing = ("closing the source and releasing the staging pool",)
            self._finish(iterator)
        except BaseException as exc:  # noqa: BLE001
            if final is END:
                final = _Failed(exc, self.where)
            else:
                logger.warning("%s: %s failed after an earlier error: %r", self._name,
                               self.where, exc)
        self._ready.put(final)

    def _loop(self, iterator: Any) -> None:
        n = 0
        while not self._stop.is_set():
            self._doing = ("reading batch {} from the source", n)
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self._doing = ("waiting for a free staging slot for batch {}", n)
            slot = self._take_free_slot()
            if slot is None:
                return
            device_s = self._ops.wait_reusable(slot, self._timeout_s, self._stop)
            ready = self._stage(slot, batch, n, device_s)
            self._ready.put(ready)
            # The consumer holds the batch now, and its last reference must drop in the
            # consumer's thread: the caching allocator records a freed tensor's stream uses in
            # the thread that frees it, and the per-thread default stream (cudaStreamPerThread)
            # names that thread's stream. Freed here, a consumer on that stream could read a
            # batch the copy stream is already overwriting (tests/gpu saw it on an H200).
            del ready, batch
            n += 1

    def _stage(self, slot: Slot, batch: Any, n: int, device_s: float) -> _Ready:
        leaves, skeleton = flatten(batch)
        normalize = self._normalize
        missing = normalize and set(normalize) - {leaf.path for leaf in leaves}
        if missing:
            raise KeyError(
                f"uint8_normalize names {sorted(missing)} but batch {n} has array fields "
                f"{[leaf.path for leaf in leaves]}; fix the field names")
        total = sum(_nbytes(leaf.value) for leaf in leaves)
        copier = self._copier
        copies, copied = copier.copies, copier.bytes_copied
        started = time.perf_counter()
        staged = []
        for leaf in leaves:
            self._doing = ("copying field {!r} of batch {} into staging", leaf.path, n)
            if leaf.path in normalize:
                normalize[leaf.path].check(leaf.value)
            staged.append(self._host_copy(slot, leaf, total))
        host_s = time.perf_counter() - started
        self._doing = ("copying batch {} to {}", n, self._ops.device)
        ops = self._ops
        ops.start_copies(slot)
        outputs = [ops.to_device(place, self._converter(leaf.path) if normalize else None)
                   for leaf, place in zip(leaves, staged, strict=True)]
        ops.end_copies(slot)
        wall_s = time.perf_counter() - started - host_s
        with self._lock:
            stats = self._stats
            stats.host_copies += copier.copies - copies
            stats.host_copy_bytes += copier.bytes_copied - copied
            stats.device_copies += len(outputs)
            stats.bytes += total
            stats.host_copy_s += host_s
            stats.copy_s += host_s + device_s + (wall_s if ops.wall_clock_copies else 0.0)
        return _Ready(slot, unflatten(skeleton, outputs), outputs)

    def _host_copy(self, slot: Slot, leaf: Leaf, batch_bytes: int) -> Staged:
        """The one host copy of a field: straight from the caller's array into the slot."""
        value = leaf.value
        dtype = value.dtype if isinstance(value, torch.Tensor) else _torch_dtype(value.dtype)
        staged = self._pool.view(slot, leaf.path, dtype, tuple(value.shape), batch_bytes)
        self._copier.copy(staged, value)
        return staged

    def _converter(self, path: str):
        spec = self._normalize.get(path)
        if spec is None:
            return None
        if path not in self._constants:
            self._constants[path] = spec.constants(self._ops.device)
        mean, std = self._constants[path]
        return lambda x: spec.apply(x, mean, std)

    def _take_free_slot(self) -> Slot | None:
        while not self._stop.is_set():
            try:
                return self._free.get(timeout=_POLL_S)
            except queue.Empty:
                continue
        return None

    def _finish(self, iterator: Any) -> None:
        """Close the source and free the pool once no copy reads it (producer thread)."""
        self._copier.close()
        close = getattr(iterator, "close", None)
        if callable(close):
            close()  # a generator source runs its cleanup (e.g. Ray's iterator) here
        device_s = 0.0
        for slot in self._pool.slots:
            # When stopping, this does not wait: torch's pinned-memory allocator keeps a buffer
            # alive until copies recorded on it finish, so freeing early is still safe.
            device_s += self._ops.wait_reusable(slot, self._timeout_s, self._stop)
        with self._lock:
            self._stats.copy_s += device_s
        self._pool.release()


def _reraise(failed: _Failed, name: str) -> None:
    exc = failed.exc
    note = f"[{name}] raised in the producer thread while {failed.where}"
    if hasattr(exc, "add_note"):
        exc.add_note(note)
        raise exc
    raise RuntimeError(f"{note}: {exc!r}") from exc


def _nbytes(value: np.ndarray | torch.Tensor | Rows) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    return int(value.nbytes)


_DTYPES: dict[np.dtype, torch.dtype] = {}


def _torch_dtype(dtype: np.dtype) -> torch.dtype:
    if dtype not in _DTYPES:
        native = dtype.newbyteorder("=")
        _DTYPES[dtype] = torch.from_numpy(np.empty(0, dtype=native)).dtype
    return _DTYPES[dtype]
