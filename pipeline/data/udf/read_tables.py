"""Reading parquet row groups for :class:`~pipeline.data.udf.reader.SampleReader`.

A row group that cannot be read makes all its rows (of this reader's split) bad samples; a row
with a null or out-of-range label, or a NaN or infinite feature, is a bad sample of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from pipeline.data.udf.bad_samples import BadSample

if TYPE_CHECKING:
    from pipeline.data.udf.reader import Batch


class TableReading:
    """Mixin of :class:`~pipeline.data.udf.reader.SampleReader`: its table path (``spec.kind ==
    "table"``), on the reader's ``spec`` and ``_record``."""

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
