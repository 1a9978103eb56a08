"""``DeviceFeeder``: host batches in, device batches out, ``depth`` batches in flight.

Runs inside a Train worker (or any torch loop); never imports Ray. Per batch it does exactly
one host copy, from the caller's arrays (what Ray Data's ``iter_batches(batch_format="numpy")``
yields) straight into a reusable staging slot, or, for a field that is a
:class:`~pipeline.transfer.rows.Rows` (a replayed epoch's rows), the gather itself into the
slot; then the device copy out of that slot: on CUDA a
``non_blocking`` copy from page-locked memory on a dedicated copy stream, overlapping the
consumer's compute; the consumer's stream waits on the slot's event and ``record_stream`` keeps
the allocator from recycling a batch's memory before the consumer's work on it ran (see
``_device_ops``). Nothing depends on the legacy default stream, so the same ordering holds when
the consumer runs on a per-thread default stream or any other stream.

CPU design (the honest one): the CPU path runs the same pool, the same thread and the same
counters, device ``cpu``. There the "device copy" is a second memcpy out of the staging slot
into memory the batch owns. Yielding views of the slot would save that copy but let slot reuse
rewrite a batch the caller still holds, so it is not done. ``stats.host_copies`` counts copies
from the caller's arrays (one per field per batch, on every device) and ``stats.device_copies``
counts the copies out of staging, so on CPU the two memcpys are both visible, not hidden.

Lifecycle: single pass. Breaking out of the loop, ``close()``, leaving a ``with`` block or
dropping the feeder stops the thread, closes the source iterator (a generator's ``finally``
runs) and frees the staging buffers. Build one feeder per epoch; the constructor does no work.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import torch

from pipeline.transfer._device_ops import ops_for
from pipeline.transfer._host_copy import auto_copy_threads
from pipeline.transfer._runtime import END, Runtime
from pipeline.transfer.config import TransferConfig
from pipeline.transfer.device import DeviceChoice, detect_device
from pipeline.transfer.normalize import Uint8Normalize, parse_uint8_normalize
from pipeline.transfer.stats import TransferStats

logger = logging.getLogger(__name__)

_ids = itertools.count()

DeviceLike = str | torch.device | DeviceChoice | None
NormalizeSpec = Mapping[str, tuple[Sequence[float], Sequence[float]]]


class DeviceFeeder:
    """Iterate host batches as device batches (Train worker; not picklable; single pass).

    Batches are dicts (possibly nested), tuples or lists of numpy arrays, CPU tensors or
    :class:`~pipeline.transfer.rows.Rows`; the same structure comes out with numeric arrays as
    tensors on the device. Other leaves (string ids, Python values) pass through unchanged. A
    yielded batch stays valid for as long as the caller keeps it; it is ready to use on the
    stream that was current at ``next()``.
    """

    def __init__(self, batches: Iterable[Any], *, device: DeviceLike = None, depth: int = 2,
                 pin_memory: bool | Literal["auto"] = "auto", min_pin_bytes: int = 1 << 20,
                 uint8_normalize: NormalizeSpec | None = None, timeout_s: float = 600.0,
                 copy_threads: int = 0):
        if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth ({depth!r}) must be an int >= 1; use 1 to disable overlap")
        if pin_memory not in (True, False, "auto"):
            raise ValueError(f"pin_memory ({pin_memory!r}) must be True, False or 'auto'")
        if isinstance(min_pin_bytes, bool) or not isinstance(min_pin_bytes, int) \
                or min_pin_bytes < 0:
            raise ValueError(f"min_pin_bytes ({min_pin_bytes!r}) must be an int >= 0; use 0 to "
                             "pin every batch")
        if isinstance(copy_threads, bool) or not isinstance(copy_threads, int) \
                or copy_threads < 0:
            raise ValueError(f"copy_threads ({copy_threads!r}) must be an int >= 0; use 0 for "
                             "automatic")
        if not timeout_s > 0:
            raise ValueError(f"timeout_s ({timeout_s!r}) must be > 0 seconds")
        if not isinstance(batches, Iterable):
            raise TypeError(f"batches ({type(batches).__name__}) must be iterable, e.g. "
                            "dataset.iter_batches(batch_format='numpy')")
        self._session = _Session(
            batches, device=device, depth=depth, pin_memory=pin_memory,
            min_pin_bytes=min_pin_bytes, normalize=parse_uint8_normalize(uint8_normalize),
            timeout_s=float(timeout_s), copy_threads=copy_threads or auto_copy_threads(),
            name=f"feedline-transfer-{next(_ids)}")
        self._iterated = False
        self._next_gen: Iterator[Any] | None = None

    @classmethod
    def from_config(cls, batches: Iterable[Any], config: TransferConfig, *,
                    device: DeviceLike = None, uint8_normalize: NormalizeSpec | None = None,
                    ) -> DeviceFeeder:
        """Build from the ``transfer`` config section (its ``stall_timeout_s`` included);
        ``device`` is what the runtime decided."""
        if config.ship_uint8 and not uint8_normalize:
            raise ValueError(
                "transfer.ship_uint8 (true) needs uint8_normalize={field: (mean, std)} for the "
                "image field; pass it, or set transfer.ship_uint8: false")
        if not config.ship_uint8 and uint8_normalize:
            raise ValueError(
                f"uint8_normalize names {sorted(uint8_normalize)} but transfer.ship_uint8 is "
                "false; set transfer.ship_uint8: true or drop uint8_normalize")
        return cls(batches, device=device, depth=config.gpu_prefetch,
                   pin_memory=config.pin_memory, min_pin_bytes=config.min_pin_bytes,
                   uint8_normalize=uint8_normalize, timeout_s=config.stall_timeout_s,
                   copy_threads=config.copy_threads)

    @property
    def stats(self) -> TransferStats:
        """A snapshot of the counters (safe to keep; the feeder's own record keeps moving)."""
        session = self._session
        with session.lock:
            return session.stats.snapshot()

    @property
    def device(self) -> torch.device | None:
        """The resolved device, or None before iteration starts."""
        choice = self._session.choice
        return None if choice is None else choice.device

    def __iter__(self) -> Iterator[Any]:
        if self._iterated or self._session.closed:
            raise RuntimeError(
                f"{self._session.name} is single-pass and was already iterated or closed; build "
                "a new DeviceFeeder for each epoch")
        self._iterated = True
        # The generator holds the session, never the feeder: a for-loop may drop the feeder
        # object while iterating, and dropping the generator (break) must close the pass.
        return _deliver(self._session)

    def __next__(self) -> Any:
        if self._next_gen is None:
            self._next_gen = iter(self)
        return next(self._next_gen)

    def close(self) -> None:
        """Stop the producer thread, close the source and free the buffers. Idempotent."""
        self._session.close()

    def __enter__(self) -> DeviceFeeder:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Session:
    """One pass's settings, counters and runtime; knows nothing of the feeder that made it."""

    def __init__(self, batches: Iterable[Any], *, device: DeviceLike, depth: int,
                 pin_memory: bool | Literal["auto"], min_pin_bytes: int,
                 normalize: dict[str, Uint8Normalize], timeout_s: float, copy_threads: int,
                 name: str):
        self.batches = batches
        self.device = device
        self.depth = depth
        self.pin_memory = pin_memory
        self.min_pin_bytes = min_pin_bytes
        self.normalize = normalize
        self.timeout_s = timeout_s
        self.copy_threads = copy_threads
        self.name = name
        self.lock = threading.Lock()
        self.stats = TransferStats()
        self.choice: DeviceChoice | None = None
        self.runtime: Runtime | None = None
        self.closed = False

    def start(self) -> Runtime:
        # The first point where the device may be touched (never the constructor).
        self.choice = detect_device("auto" if self.device is None else self.device)
        logger.info("%s: feeding %s", self.name, self.choice.reason)
        with self.lock:
            self.stats.device = self.choice.reason
        self.runtime = Runtime(
            self.batches, ops=ops_for(self.choice.device), depth=self.depth,
            pin_memory=self.pin_memory, min_pin_bytes=self.min_pin_bytes,
            normalize=self.normalize, timeout_s=self.timeout_s,
            copy_threads=self.copy_threads, stats=self.stats,
            lock=self.lock, name=self.name)
        self.batches = None  # the runtime's thread owns the source now
        return self.runtime

    def close(self) -> None:
        self.closed = True
        if self.runtime is not None:
            self.runtime.close()


def _deliver(session: _Session) -> Iterator[Any]:
    """The consumer loop; starts the pass on the first ``next()``, closes it on exit."""
    if session.closed:
        return
    runtime = session.start()
    try:
        while True:
            batch = runtime.next_batch()
            if batch is END:
                return
            yield batch
            batch = None  # do not keep the caller's previous batch alive while waiting
    finally:
        session.close()
