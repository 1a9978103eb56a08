"""Turning manifest rows into training rows, inside Ray Data workers.

:class:`SampleReader` runs as a Ray Data actor (it must be picklable): it reads each sample
(an image file, or a parquet row group), decodes and normalises it, applies the user's
transform, and emits ``{"id", "label", "image" | "features"}``. A sample that cannot be read or
decoded is dropped from the batch, counted, and sent to the run's quarantine with its reason;
its good neighbours are still delivered. A failing user transform is a bug, not a bad sample,
and fails the run with the transform's own error.

Image files are read on a helper thread with a deadline (``data.sample_timeout_s``), so a read
that never returns (a stale network mount) is quarantined as ``timeout`` while it is still
stuck; a FIFO or device, whose open() could block forever, is refused from its ``os.stat``::

    actor thread:  path ─► jobs ─► wait(deadline) ─► image | quarantine(timeout)
    read thread:          jobs ─► stat, read, decode ─► its own reply box

Python cannot interrupt a read stuck in the kernel: its thread is abandoned (a daemon, holding
its file descriptor until the read returns or the actor exits) and a fresh one takes the next
sample. Storage where every read hangs stops the run through ``data.max_consecutive_bad``
before such threads pile up.
"""

from __future__ import annotations

import io
import logging
import math
import os
import queue
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.config.callables import load_callable

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]


@dataclass(frozen=True)
class ReaderSpec:
    """Everything a reader needs; plain values so it pickles to every node."""

    kind: str  # "image" or "table"
    origin: str
    image_size: tuple[int, int] = (32, 32)
    channels: int = 1
    mean: tuple[float, ...] = (0.5,)
    std: tuple[float, ...] = (0.5,)
    ship_uint8: bool = False
    transform: str = ""
    features: tuple[str, ...] = ()
    label_column: str = "label"
    id_column: str = ""
    keep_ids: Any = None  # for tables: a (val_fraction, seed, want_val) split applied per row
    max_bad_fraction: float = 1.0
    max_consecutive_bad: int = 1 << 30
    sample_timeout_s: float = float("inf")
    max_image_pixels: int = 89_478_485  # Pillow's Image.MAX_IMAGE_PIXELS
    num_classes: int = 0  # labels must lie in [0, num_classes); 0 checks only for negatives


class BadSampleThresholdError(RuntimeError):
    """Too many bad samples: the data, not a few files, is broken. Stops the run."""


class BadSample(ValueError):
    """A sample refused for a known reason; ``error_type`` names it in the quarantine record."""

    def __init__(self, error_type: str, message: str):
        super().__init__(message)
        self.error_type = error_type


class ReadThread:
    """Runs one read at a time off the actor's thread, so the actor can give up on it.

    Lives inside a Ray Data actor and is made there, on first use (threads do not pickle). Each
    call gets its own reply box: a read that returns after its deadline answers into a box
    nobody waits on, so a sample is either delivered or quarantined, never both.
    """

    def __init__(self):
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="feedline-read", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                fn, arg, reply = self._jobs.get(timeout=1.0)
            except queue.Empty:
                continue
            try:
                reply.put((True, fn(arg)))
            except Exception as exc:  # re-raised on the actor's thread by call()
                reply.put((False, exc))

    def call(self, fn: Callable[[Any], Any], arg: Any, timeout: float) -> Any:
        """``fn(arg)`` on the read thread; ``TimeoutError`` when it has not returned in time."""
        reply: queue.SimpleQueue = queue.SimpleQueue()
        self._jobs.put((fn, arg, reply))
        try:
            ok, value = reply.get(timeout=None if math.isinf(timeout) else timeout)
        except queue.Empty:
            raise TimeoutError from None
        if not ok:
            raise value
        return value

    def abandon(self) -> None:
        """Leave a stuck thread behind: it exits if its read ever returns."""
        self._stop.set()


SPECIAL_FILES = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                 (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
                 (stat.S_ISDIR, "a directory"))


def to_eight_bit(img: Any, mode: str) -> Any:
    """A Pillow image as 8-bit ``mode`` ("L" or "RGB"), by the documented rules:

    - 16-bit greyscale (``I;16*``, and ``I`` holding 16-bit values) is scaled by 255/65535;
      Pillow's own conversion clips at 255 and turns it nearly white.
    - Transparency (RGBA, LA, PA, or a P/L/RGB image with a transparent colour) is composited
      on black: a transparent pixel is black whatever colour it hides.
    """
    from PIL import Image

    if img.mode in ("I", "I;16", "I;16B", "I;16L", "I;16N"):
        pixels = np.clip(np.asarray(img), 0, 65535).astype(np.uint32)
        img = Image.fromarray(((pixels + 128) // 257).astype(np.uint8), "L")
    elif img.has_transparency_data:
        rgba = img.convert("RGBA")
        img = Image.alpha_composite(Image.new("RGBA", rgba.size, (0, 0, 0, 255)), rgba)
    return img.convert(mode)


def first_sources(records: list[dict[str, Any]]) -> str:
    return "; ".join(f"{r['source']} ({r['error_type']}: {r['message']})" for r in records[:3])


def bad_fraction_message(limit: float, bad: int, seen: int, origin: str,
                         records: list[dict[str, Any]]) -> str:
    return (f"data.max_bad_fraction ({limit}) exceeded: {bad} of {seen} samples "
            f"({bad / seen:.1%}) from {origin} could not be read; first: "
            f"{first_sources(records)}. Fix or remove those files, or raise "
            f"data.max_bad_fraction")


# A reader judges the bad fraction only after this many samples, and then stops the run only
# when the fraction is clearly above the limit: the Wilson lower bound at Z standard errors
# exceeds it. A 2.5% bad set with a 5% limit must not stop because 7 of the first 128 samples
# happened to be bad; a fraction just above the limit is caught by the driver's exact check
# over the whole epoch (quarantine.check_bad_fraction).
MIN_SAMPLES_FOR_FRACTION = 100
Z = 3.0


def clearly_above(bad: int, seen: int, limit: float, z: float = Z) -> bool:
    """Whether ``bad`` of ``seen`` shows a bad fraction above ``limit`` beyond sampling noise."""
    if seen < MIN_SAMPLES_FOR_FRACTION:
        return False
    p, z2 = bad / seen, z * z
    spread = z * math.sqrt(p * (1 - p) / seen + z2 / (4 * seen * seen))
    return (p + z2 / (2 * seen) - spread) / (1 + z2 / seen) > limit


class SampleReader:
    """Ray Data actor UDF: manifest batch in, decoded rows out; picklable."""

    def __init__(self, spec: ReaderSpec, quarantine: Any = None):
        self.spec = spec
        self.quarantine = quarantine
        self.seen = self.bad = self.consecutive_bad = self.longest_bad_run = 0
        self.first_bad: list[dict[str, Any]] = []
        self.abandoned = 0  # read threads left stuck in a read
        self._thread: ReadThread | None = None  # made on first use, inside the actor
        self.transform = load_callable(spec.transform, "data.transform") if spec.transform else None
        channels = spec.channels  # a single mean/std applies to every channel
        self._mean = np.asarray(spec.mean * (channels // len(spec.mean)), np.float32)[:, None, None]
        self._std = np.asarray(spec.std * (channels // len(spec.std)), np.float32)[:, None, None]

    # -- images ---------------------------------------------------------------------------

    def _decode(self, path: str) -> np.ndarray:
        """Runs on the read thread; raises for a bad file."""
        from PIL import Image

        mode = os.stat(path).st_mode  # before open(): opening a FIFO blocks until a writer comes
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in SPECIAL_FILES if test(mode)), "a special file")
            raise BadSample("not_a_regular_file", f"{kind}, not a regular file; only image "
                                                  f"files are read")
        with open(path, "rb") as fh:
            raw = fh.read()
        if not raw:
            raise ValueError("empty file (0 bytes)")
        limit = self.spec.max_image_pixels
        try:
            img = Image.open(io.BytesIO(raw))  # reads the header only
        except Image.DecompressionBombError as exc:  # beyond twice Pillow's own limit
            raise BadSample("too_large", f"its header declares more pixels than "
                                         f"data.max_image_pixels ({limit:,}) (Pillow: {exc}); "
                                         f"refused before decoding") from None
        with img:
            width, height = img.size
            if width * height > limit:
                raise BadSample("too_large", f"{width}x{height} = {width * height:,} pixels "
                                             f"(from its header) > data.max_image_pixels "
                                             f"({limit:,}); refused before decoding")
            img = to_eight_bit(img, "L" if self.spec.channels == 1 else "RGB")
            height, width = self.spec.image_size
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
        return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)

    def _read(self, path: str) -> np.ndarray:
        """Decode ``path`` on the read thread within ``data.sample_timeout_s``."""
        if self._thread is None:
            from PIL import Image

            if Image.MAX_IMAGE_PIXELS and self.spec.max_image_pixels > Image.MAX_IMAGE_PIXELS:
                # Pillow refuses at twice its own limit: it must not undercut a higher one
                Image.MAX_IMAGE_PIXELS = self.spec.max_image_pixels
            self._thread = ReadThread()
        try:
            return self._thread.call(self._decode, path, self.spec.sample_timeout_s)
        except TimeoutError:
            self._thread.abandon()
            self._thread = ReadThread()
            self.abandoned += 1
            logger.warning("a read of %s has not returned after %g s; its thread is abandoned "
                           "(%d so far in this actor)", path, self.spec.sample_timeout_s,
                           self.abandoned)
            raise BadSample("timeout", f"read and decode did not finish within "
                                       f"data.sample_timeout_s ({self.spec.sample_timeout_s:g} s)"
                            ) from None

    def _images(self, batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
        good, images, bad = [], [], []
        for i, path in enumerate(batch["path"]):
            try:
                image = self._read(str(path))
            except Exception as exc:  # noqa: BLE001 - any failure is this file's, not the block's
                bad.append(self._record(int(batch["id"][i]), str(path), "decode", exc))
                continue
            images.append(image)
            good.append(i)
            self.consecutive_bad = 0
        channels, (height, width) = self.spec.channels, self.spec.image_size
        stacked = (np.stack(images) if images
                   else np.empty((0, channels, height, width), np.uint8))
        if not self.spec.ship_uint8:
            stacked = (stacked.astype(np.float32) / 255.0 - self._mean) / self._std
        index = np.asarray(good, dtype=np.int64)
        return {"id": batch["id"][index], "label": batch["label"][index], "image": stacked}, bad

    # -- tables ---------------------------------------------------------------------------

    def _tables(self, batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
        import pyarrow.parquet as pq

        spec = self.spec
        ids, labels, features, bad = [], [], [], []
        columns = list(dict.fromkeys([*spec.features, spec.label_column]
                                     + ([spec.id_column] if spec.id_column else [])))
        for file, group, first_id, rows in zip(batch["file"], batch["row_group"], batch["id"],
                                               batch["rows"], strict=True):
            try:
                table = pq.ParquetFile(str(file)).read_row_group(int(group), columns=columns)
            except Exception as exc:  # noqa: BLE001 - a corrupt file's rows are bad samples
                if spec.id_column:  # the ids are inside the unreadable data
                    raise ValueError(f"{file}: row group {group} cannot be read ({exc}); its "
                                     f"rows have unknown ids ({spec.id_column}) and cannot be "
                                     f"quarantined: fix or remove the file") from exc
                row_ids = np.arange(first_id, first_id + int(rows), dtype=np.int64)
                for row_id in row_ids[self._ours(row_ids)]:
                    bad.append(self._record(int(row_id), f"{file}#rowgroup{group}", "read", exc))
                continue
            row_ids = (table.column(spec.id_column).to_numpy().astype(np.int64) if spec.id_column
                       else np.arange(first_id, first_id + table.num_rows, dtype=np.int64))
            x = np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float32)
                          for c in spec.features], axis=1)
            label = table.column(spec.label_column)
            null = label.is_null(nan_is_null=True).to_numpy(zero_copy_only=False)
            # a null read as int64 is -2**63: judge it before it can reach the loss
            y = np.where(null, 0, label.to_numpy(zero_copy_only=False)).astype(np.int64)
            keep = self._ours(row_ids)
            rejected = self._bad_rows(x, y, null)
            for i, exc in sorted(rejected.items()):
                if keep[i]:
                    bad.append(self._record(int(row_ids[i]), f"{file}#rowgroup{group}/row{i}",
                                            "validate", exc))
            keep[list(rejected)] = False
            if keep.any():  # table rows: a good row anywhere in the group ends the bad run
                self.consecutive_bad = 0
            ids.append(row_ids[keep])
            labels.append(y[keep])
            features.append(x[keep])
        width = len(spec.features)
        return {"id": np.concatenate(ids) if ids else np.empty(0, np.int64),
                "label": np.concatenate(labels) if labels else np.empty(0, np.int64),
                "features": np.concatenate(features) if features
                else np.empty((0, width), np.float32)}, bad

    def _ours(self, row_ids: np.ndarray) -> np.ndarray:
        """Which rows belong to this reader's split (train or validation)."""
        from pipeline.data.split import validation_mask

        if self.spec.keep_ids is None:
            return np.ones(len(row_ids), bool)
        val_fraction, seed, want_val = self.spec.keep_ids
        return validation_mask(row_ids, val_fraction, seed) == want_val

    def _bad_rows(self, x: np.ndarray, y: np.ndarray, null: np.ndarray) -> dict[int, Exception]:
        """Rows that cannot be trained on, by position, each with its first reason."""
        column, classes = self.spec.label_column, self.spec.num_classes
        out: dict[int, Exception] = {}
        for i in np.flatnonzero(null):
            out[int(i)] = BadSample("null_label", f"{column} is null")
        high = classes or np.iinfo(np.int64).max
        for i in np.flatnonzero(~null & ((y < 0) | (y >= high))):
            known = f"in [0, {classes})" if classes else ">= 0"
            out[int(i)] = BadSample("label_out_of_range",
                                    f"{column} ({y[i]}) is not a class index {known}")
        for i in np.flatnonzero(~np.isfinite(x).all(axis=1)):
            out.setdefault(int(i), ValueError("NaN or infinite value in a feature column"))
        return out

    # -- common ---------------------------------------------------------------------------

    def _record(self, sample_id: int, source: str, stage: str, exc: BaseException) -> dict:
        self.consecutive_bad += 1
        self.longest_bad_run = max(self.longest_bad_run, self.consecutive_bad)
        return {"id": sample_id, "source": source, "stage": stage,
                "error_type": getattr(exc, "error_type", type(exc).__name__),
                "message": str(exc)[:500] or repr(exc)}

    def _check_thresholds(self, good: int, bad: list[dict[str, Any]]) -> None:
        """Count this batch; raise when the bad samples say the data itself is broken."""
        spec = self.spec
        self.seen += good + len(bad)
        self.bad += len(bad)
        self.first_bad.extend(bad[: max(0, 3 - len(self.first_bad))])
        message = ""
        if self.longest_bad_run > spec.max_consecutive_bad:
            message = (f"data.max_consecutive_bad ({spec.max_consecutive_bad}) exceeded: "
                       f"{self.longest_bad_run} bad samples in a row from {spec.origin}; "
                       f"first: {first_sources(self.first_bad)}")
        elif clearly_above(self.bad, self.seen, spec.max_bad_fraction):
            message = bad_fraction_message(spec.max_bad_fraction, self.bad, self.seen,
                                           spec.origin, self.first_bad)
        if message:
            if self.quarantine is not None:
                self.quarantine.fail.remote(message)
            raise BadSampleThresholdError(message)

    def __call__(self, batch: Batch) -> Batch:
        out, bad = self._images(batch) if self.spec.kind == "image" else self._tables(batch)
        if bad:
            logger.warning("quarantined %d bad sample(s), first: %s", len(bad), bad[0])
            if self.quarantine is not None:
                self.quarantine.add.remote(bad)
        self._check_thresholds(len(out["id"]), bad)
        if self.transform is not None and len(out["id"]):
            out = self.transform(out)
            if not isinstance(out, dict) or "id" not in out:
                raise TypeError(f"data.transform ({self.spec.transform!r}) must return the batch "
                                f"dict it was given (with 'id' and 'label'), got {type(out)}")
        return out
