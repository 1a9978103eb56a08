"""Parquet columns → tensors, planned per row group on the driver.

The manifest has one row per row group (file, row group, first id, rows) rather than per sample,
so planning a billion-row table stays cheap; ids are the row's position in the sorted file list
unless the table has an id column of its own.

Every file's footer is read here, so a file that is not parquet, lacks a column or holds the
wrong type is refused with its path before Ray starts. Labels must already be integer class
indices 0..K-1: string labels are refused rather than mapped, because the mapping would have to
be kept with the checkpoint for predictions to mean anything. Files the source does not read
(other extensions, files with 0 rows) are kept in ``SourcePlan.skipped`` with the reason.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from pipeline.config import ConfigError
from pipeline.data.config import ParquetSource
from pipeline.data.sources.base import SourcePlan

# errors named one per line; a folder of a thousand broken files says how many more there are
ERRORS_LISTED = 10


def _files(path: Path) -> tuple[list[Path], list[tuple[str, str]]]:
    """The parquet files under ``path`` (sorted: ids follow this order) and the other files."""
    if path.is_file():
        return [path], []
    if path.is_dir():
        files, skipped = [], []
        for p in sorted(path.rglob("*")):
            if p.is_file() and p.name.endswith(".parquet"):
                files.append(p)
            elif p.is_file():
                skipped.append((str(p), "not .parquet"))
        return files, skipped
    raise ConfigError([f"data.source.path ({str(path)!r}) does not exist; give a .parquet file "
                       f"or a directory of them"])


def _is_number(kind: pa.DataType) -> bool:
    return pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind)


def feature_columns(source: ParquetSource, schema: pa.Schema) -> tuple[str, ...]:
    """The columns stacked into ``features``: the configured ones, or all but label and id."""
    return source.features or tuple(
        n for n in schema.names if n not in (source.label_column, source.id_column))


def _schema_errors(source: ParquetSource, file: Path, schema: pa.Schema,
                  features: tuple[str, ...]) -> list[str]:
    """What in one file's columns the reader could not turn into features, label and id."""
    names, errors = list(schema.names), []
    for field in ("label_column", "id_column"):
        column = getattr(source, field)
        if not column:
            continue
        if column not in names:
            errors.append(f"data.source.{field} ({column!r}) is not a column of {file}; its "
                          f"columns are {names}")
        elif not pa.types.is_integer(schema.field(column).type):
            what = ("integer class indices 0..K-1 (string labels are not mapped): convert "
                    "them, e.g. with pandas' .astype('category').cat.codes"
                    if field == "label_column" else "integers: convert it")
            errors.append(f"data.source.{field} ({column!r}) is {schema.field(column).type} in "
                          f"{file}; it must hold {what}")
    missing = [c for c in features if c not in names]
    if missing:
        errors.append(f"data.source.features: {file} lacks column(s) {missing}; its columns are "
                      f"{names}: add them, or list only shared columns in data.source.features")
    wrong = {c: str(schema.field(c).type) for c in features
             if c in names and not _is_number(schema.field(c).type)}
    if wrong:
        errors.append(f"data.source.features: column(s) {wrong} of {file} are not numbers; "
                      f"convert them, or leave them out of data.source.features")
    return errors


def _classes(source: ParquetSource, files: list[Path]) -> tuple[str, ...]:
    """Classes 0..max label; refused unless at least two occur. A null or negative label is
    not a class: the reader quarantines its row."""
    seen: set[int] = set()
    for file in files:
        meta = pq.ParquetFile(file)
        for group in range(meta.num_row_groups):
            try:
                labels = meta.read_row_group(group, columns=[source.label_column]).column(0)
            except (pa.ArrowException, OSError):  # the reader quarantines this group's rows
                continue
            seen.update(v for v in pc.unique(labels).to_pylist() if v is not None and v >= 0)
    if len(seen) < 2:
        found = f"only class {seen.pop()}" if seen else "no class index >= 0 (null or negative)"
        raise ConfigError([f"data.source.label_column ({source.label_column!r}) holds {found} "
                           f"in {source.path}; a classifier needs at least two classes: check "
                           f"the column and the files"])
    return tuple(str(c) for c in range(max(seen) + 1))


def plan_parquet(source: ParquetSource) -> tuple[SourcePlan, tuple[str, ...]]:
    files, skipped = _files(Path(source.path).expanduser())
    if not files:
        raise ConfigError([f"data.source.path ({source.path!r}) holds no .parquet files"
                           + (f" (only {len(skipped)} other files, e.g. {skipped[0][0]})"
                              if skipped else "")])
    rows = {"file": [], "row_group": [], "id": [], "rows": []}
    first_id, features, errors, read = 0, None, [], []
    for file in files:
        try:
            meta = pq.ParquetFile(file)
        except (pa.ArrowException, OSError) as exc:
            errors.append(f"data.source.path: {file} is not a readable parquet file ({exc}); "
                          f"remove or replace it")
            continue
        if features is None:  # the first file's columns decide the default features
            features = feature_columns(source, meta.schema_arrow)
        file_errors = _schema_errors(source, file, meta.schema_arrow, features)
        errors.extend(file_errors)
        if file_errors:
            continue
        if meta.metadata.num_rows == 0:
            skipped.append((str(file), "with 0 rows"))
            continue
        read.append(file)
        for group in range(meta.num_row_groups):
            count = meta.metadata.row_group(group).num_rows
            if not count:
                continue
            rows["file"].append(str(file))
            rows["row_group"].append(group)
            rows["id"].append(first_id)
            rows["rows"].append(count)
            first_id += count
    if features == ():
        errors.append(f"data.source.features: {source.path} has no feature columns besides the "
                      f"label")
    if errors:
        more = len(errors) - ERRORS_LISTED
        raise ConfigError(errors[:ERRORS_LISTED] + ([f"... and {more} more"] if more > 0 else []))
    if not read:
        raise ConfigError([f"data.source.path ({source.path!r}) holds no rows: every .parquet "
                           f"file has 0 rows"])
    manifest = pa.table({"id": pa.array(rows["id"], pa.int64()),
                         "file": rows["file"], "row_group": rows["row_group"],
                         "rows": rows["rows"]})
    plan = SourcePlan(manifest=manifest, classes=_classes(source, read), kind="table",
                      origin=source.path, skipped=tuple(skipped))
    return plan, features
