"""Turning manifest rows into training rows, inside Ray Data workers.

:class:`SampleReader` runs as a Ray Data actor (it must be picklable): it reads each sample
(an image file, or a parquet row group), decodes and normalises it, applies the user's
transform, and emits ``{"id", "label", "image" | "features"}``. A sample that cannot be read or
decoded is dropped from the batch, counted, and sent to the run's quarantine with its reason;
its good neighbours are still delivered. A failing user transform is a bug, not a bad sample,
and fails the run with the transform's own error.
"""

from __future__ import annotations

import importlib
import io
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)

Batch = dict[str, np.ndarray]


def load_callable(spec: str, field: str) -> Callable[..., Any]:
    """Import ``'module:attribute'``; errors name the config field and the remedy."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{field} ({spec!r}) must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"{field} ({spec!r}): cannot import {module_name!r} ({exc}); make the "
                         f"module importable on every node (e.g. ray job submit --working-dir)"
                         ) from exc
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise ValueError(f"{field} ({spec!r}): {module_name} has no callable {attr!r}")
    return fn


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


class BadSampleThresholdError(RuntimeError):
    """Too many bad samples: the data, not a few files, is broken. Stops the run."""


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
        self.transform = load_callable(spec.transform, "data.transform") if spec.transform else None
        channels = spec.channels  # a single mean/std applies to every channel
        self._mean = np.asarray(spec.mean * (channels // len(spec.mean)), np.float32)[:, None, None]
        self._std = np.asarray(spec.std * (channels // len(spec.std)), np.float32)[:, None, None]

    # -- images ---------------------------------------------------------------------------

    def _decode(self, path: str) -> np.ndarray:
        from PIL import Image

        with open(path, "rb") as fh:
            raw = fh.read()
        if not raw:
            raise ValueError("empty file (0 bytes)")
        with Image.open(io.BytesIO(raw)) as img:
            img = img.convert("L" if self.spec.channels == 1 else "RGB")
            height, width = self.spec.image_size
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
        return pixels[None] if pixels.ndim == 2 else pixels.transpose(2, 0, 1)

    def _images(self, batch: Batch) -> tuple[Batch, list[dict[str, Any]]]:
        good, images, bad = [], [], []
        for i, path in enumerate(batch["path"]):
            start = time.perf_counter()
            try:
                image = self._decode(str(path))
            except (OSError, ValueError, SyntaxError) as exc:  # PIL raises these for bad files
                bad.append(self._record(int(batch["id"][i]), str(path), "decode", exc))
                continue
            took = time.perf_counter() - start
            if took > self.spec.sample_timeout_s:
                bad.append(self._record(int(batch["id"][i]), str(path), "decode", TimeoutError(
                    f"read and decode took {took:.1f} s > data.sample_timeout_s "
                    f"({self.spec.sample_timeout_s:g})")))
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

        from pipeline.data.split import validation_mask

        spec = self.spec
        ids, labels, features, bad = [], [], [], []
        for file, group, first_id in zip(batch["file"], batch["row_group"], batch["id"],
                                         strict=True):
            columns = list(dict.fromkeys([*spec.features, spec.label_column]
                                         + ([spec.id_column] if spec.id_column else [])))
            table = pq.ParquetFile(str(file)).read_row_group(int(group), columns=columns)
            row_ids = (table.column(spec.id_column).to_numpy().astype(np.int64) if spec.id_column
                       else np.arange(first_id, first_id + table.num_rows, dtype=np.int64))
            x = np.stack([table.column(c).to_numpy(zero_copy_only=False).astype(np.float32)
                          for c in spec.features], axis=1)
            y = table.column(spec.label_column).to_numpy(zero_copy_only=False).astype(np.int64)
            keep = np.ones(len(row_ids), bool)
            if spec.keep_ids is not None:
                val_fraction, seed, want_val = spec.keep_ids
                keep = validation_mask(row_ids, val_fraction, seed) == want_val
            finite = np.isfinite(x).all(axis=1)
            for i in np.flatnonzero(keep & ~finite):
                bad.append(self._record(int(row_ids[i]), f"{file}#row{i}", "validate",
                                        ValueError("NaN or infinite value in a feature column")))
            keep &= finite
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

    # -- common ---------------------------------------------------------------------------

    def _record(self, sample_id: int, source: str, stage: str, exc: BaseException) -> dict:
        self.consecutive_bad += 1
        self.longest_bad_run = max(self.longest_bad_run, self.consecutive_bad)
        return {"id": sample_id, "source": source, "stage": stage,
                "error_type": type(exc).__name__, "message": str(exc)[:500]}

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
