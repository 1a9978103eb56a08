"""Datasets of the integration tests, built as users build theirs (``ray.data.read_parquet`` and
their own maps). Torch-free on purpose: every Ray Data worker that runs one of these maps imports
this module."""


def write_position_rows(folder, files=3, rows=200):
    """Parquet files of rows (position, a, b, c, label), ``position`` counting the rows over
    the files in name order; the rows' count."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        a, b, c = rng.normal(size=(3, rows))
        pq.write_table(pa.table({"position": np.arange(f * rows, (f + 1) * rows), "a": a, "b": b,
                                 "c": c, "label": (b > 0).astype(np.int64)}),
                       folder / f"part-{f}.parquet")
    return files * rows


def _stack(batch):
    import numpy as np

    x = np.stack([batch[k] for k in ("position", "a", "b", "c")], axis=1).astype(np.float32)
    return {"x": x, "label": batch["label"]}


def position_rows(path):
    """``data.source.function`` of the tests: the rows under ``path`` as a Ray Dataset of
    ``x`` (float32 [4], position first) and ``label``, as a user builds one."""
    import ray.data

    return ray.data.read_parquet(path).map_batches(_stack, batch_format="numpy")


def _drop_last_feature(batch):
    return {"x": batch["x"][:, :-1], "label": batch["label"]}


def narrower_rows(path):
    """:func:`position_rows` with one feature fewer per row: a validation set built by another
    script than the training set's."""
    return position_rows(path).map_batches(_drop_last_feature, batch_format="numpy")


def _ragged(batch):
    import numpy as np

    x = np.empty(len(batch["x"]), dtype=object)
    for i, row in enumerate(batch["x"]):
        x[i] = row[: 2 + i % 2]  # rows of 2 and 3 features
    return {"x": x, "label": batch["label"]}


def _fails_on_row_7(batch):
    if 7 in batch["x"][:, 0]:
        raise ValueError("cannot parse row 7: 'n/a' is not a number")
    return batch


def broken_rows(path, how):
    """:func:`position_rows` broken as users break theirs: ``ragged`` rows, ``empty`` (a filter
    that drops every row), or a map that ``raises`` on one row."""
    ds = position_rows(path)
    if how == "ragged":
        return ds.map_batches(_ragged, batch_format="numpy")
    if how == "empty":
        return ds.filter(lambda row: row["label"] > 5)
    return ds.map_batches(_fails_on_row_7, batch_format="numpy")
