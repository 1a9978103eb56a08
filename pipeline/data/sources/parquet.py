"""Parquet columns → tensors, planned per row group on the driver.

The manifest has one row per row group (file, row group, first id, rows) rather than per sample,
so planning a billion-row table stays cheap; ids are the row's position in the sorted file list
unless the table has an id column of its own.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.data.config import ParquetSource
from pipeline.data.sources.base import SourcePlan


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    if path.is_dir():
        return sorted(p for p in path.rglob("*.parquet") if p.is_file())
    raise ValueError(f"data.source.path ({str(path)!r}) does not exist; give a .parquet file or a "
                     f"directory of them")


def feature_columns(source: ParquetSource, schema: pa.Schema) -> tuple[str, ...]:
    """The columns stacked into ``features``: the configured ones, or all but label and id."""
    names = list(schema.names)
    for field in ("label_column", "id_column"):
        column = getattr(source, field)
        if column and column not in names:
            raise ValueError(f"data.source.{field} ({column!r}) is not a column of "
                             f"{source.path}; columns are {names}")
    features = source.features or tuple(
        n for n in names if n not in (source.label_column, source.id_column))
    missing = [c for c in features if c not in names]
    if missing:
        raise ValueError(f"data.source.features ({list(source.features)}) names columns "
                         f"{missing} that {source.path} does not have; columns are {names}")
    if not features:
        raise ValueError(f"data.source.features: {source.path} has no feature columns besides "
                         f"the label")
    return tuple(features)


def plan_parquet(source: ParquetSource) -> tuple[SourcePlan, tuple[str, ...]]:
    files = _files(Path(source.path).expanduser())
    if not files:
        raise ValueError(f"data.source.path ({source.path!r}) holds no .parquet files")
    rows = {"file": [], "row_group": [], "id": [], "rows": []}
    first_id = 0
    schema = None
    for file in files:
        meta = pq.ParquetFile(file)
        schema = schema or meta.schema_arrow
        for group in range(meta.num_row_groups):
            count = meta.metadata.row_group(group).num_rows
            rows["file"].append(str(file))
            rows["row_group"].append(group)
            rows["id"].append(first_id)
            rows["rows"].append(count)
            first_id += count
    features = feature_columns(source, schema)
    labels = pq.read_table(files, columns=[source.label_column]).column(0)
    classes = tuple(str(c) for c in range(int(pc.max(labels).as_py()) + 1))
    manifest = pa.table({"id": pa.array(rows["id"], pa.int64()),
                         "file": rows["file"], "row_group": rows["row_group"],
                         "rows": rows["rows"]})
    plan = SourcePlan(manifest=manifest, classes=classes, kind="table", origin=source.path)
    return plan, features
