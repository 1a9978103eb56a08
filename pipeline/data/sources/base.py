"""What every source hands to the dataset builder: a manifest of samples, one row each."""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa


@dataclass(frozen=True)
class SourcePlan:
    """Made on the driver. ``manifest`` has an ``id`` column (stable int64) and what a worker
    needs to produce that sample (a file path, or a parquet file and row)."""

    manifest: pa.Table
    classes: tuple[str, ...]
    kind: str  # "image" (decode files) or "table" (rows already hold the values)
    origin: str  # shown in errors and quarantine records
