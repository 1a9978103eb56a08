"""A Ray Dataset the user builds as the source: ``data.source.kind: ray`` (a ``module:function``
that returns one) or ``pipeline.run(cfg, datasets={"train": ds, "val": ds_val})``.

Rows are numeric columns of one shape each; every column reaches the task's ``loss`` as a device
tensor, with ``id``. Rows without an ``id`` column get one here: the row's position in the
dataset's order, counted by one small actor that sees the blocks in order (Ray Data's
``preserve_order`` is switched on for that dataset and in the trainer's ``DataConfig``, which
would otherwise override it, so its blocks also leave in order).
Validation ids start at ``VAL_IDS`` so the two sets never meet. A single dataset is split by
``data.val_fraction`` on those ids, as Feedline's own sources are.

What the ids keep depends on the dataset:

- **deterministic** (the same rows in the same order every pass: ``read_parquet`` of files that
  do not change, maps without randomness): an id names the same row in every epoch, run and
  resume. Exactly-once accounting, the validation split and a mid-epoch resume (which skips the
  ids the epoch already trained) all hold, as for Feedline's own sources.
- **not deterministic** (``random_shuffle`` without a seed, files that change between passes,
  randomness in a map): every epoch still numbers each row it delivers once, so a lost or
  duplicated delivery is still found, but an id may name another row in the next pass. The
  split then moves rows between train and validation from pass to pass (pass
  ``{"train", "val"}`` instead), and a resumed epoch skips as many rows as it trained, not
  the same rows. Give such data an ``id`` column of its own.

Planning makes one pass over the ids (and labels) on the driver: the sample counts, the
training ids for the accounting and the classes. Ray Data reads only those columns where the
source can (parquet), but a dataset with its own maps runs them once more for this pass. Rows
Feedline numbers are counted on the user's dataset as it is (their ids are their positions), so
the numbering actor first starts with the first epoch, not while planning.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa

from pipeline.config import ConfigError
from pipeline.config.callables import load_callable
from pipeline.data.config import DataConfig, RaySource
from pipeline.data.split import validation_mask

VAL_IDS = 1 << 48  # first assigned id of a validation dataset
FIELD = "data.source.function"


def user_datasets(source: RaySource, given: Any = None) -> tuple[dict[str, Any], str]:
    """``{"train": Dataset[, "val": Dataset]}`` and where they came from: ``given``
    (``pipeline.run(datasets=...)``) or ``source.function(**source.args)``. Runs on the driver
    once Ray is connected; a ``ConfigError`` names the field, the value and the remedy."""
    import ray.data

    if given is not None and source.function:
        raise ConfigError([f"{FIELD} ({source.function!r}) and pipeline.run(datasets=...) both "
                           f"name the data; keep one"])
    if given is None:
        if not source.function:
            raise ConfigError([f"{FIELD} is empty: name a 'module:function' that returns a "
                               f"ray.data.Dataset, or pass pipeline.run(cfg, datasets=...)"])
        try:
            fn = load_callable(source.function, FIELD)
        except ValueError as exc:
            raise ConfigError([str(exc)]) from exc
        given = fn(**(source.args or {}))
        where = f"{FIELD} ({source.function!r})"
        origin = source.function
    else:
        where, origin = "pipeline.run(datasets=...)", "datasets given to pipeline.run"
    if isinstance(given, ray.data.Dataset):
        given = {"train": given}
    if (not isinstance(given, Mapping) or "train" not in given or set(given) - {"train", "val"}
            or not all(isinstance(d, ray.data.Dataset) for d in given.values())):
        raise ConfigError([f"{where} gave {_kind(given)}: expected a ray.data.Dataset or a dict "
                           f"{{'train': Dataset, 'val': Dataset}}"])
    return dict(given), origin


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {type(v).__name__}" for k, v in value.items()) + "}"
    return type(value).__name__


class _Positions:
    """Numbers the rows of one execution of a dataset in the order its blocks arrive (one
    actor that runs its calls in the order they were sent, unlike Ray Data's default;
    ``preserve_order``): the position in the dataset, from ``FIRST``. It is never
    restarted (``max_restarts=0``): a restarted one would count from ``FIRST`` again, so its
    loss fails the execution (and Ray Train's retry reruns the epoch) instead."""

    FIRST = 0

    def __init__(self):
        self.next = self.FIRST

    def __call__(self, block: pa.Table) -> pa.Table:
        ids = np.arange(self.next, self.next + block.num_rows, dtype=np.int64)
        self.next += block.num_rows
        return block.append_column("id", pa.array(ids))


class _ValPositions(_Positions):
    FIRST = VAL_IDS


def _split(block: pa.Table, val_fraction: float, seed: int, want_val: bool) -> pa.Table:
    """The rows of one side of the id-based validation split."""
    mask = validation_mask(block.column("id").to_numpy(), val_fraction, seed) == want_val
    return block.filter(pa.array(mask))


def with_ids(ds: Any, val: bool = False) -> tuple[Any, Any]:
    """``ds`` with an int64 ``id`` column: its own (checked) or the row positions (from
    ``VAL_IDS`` for a validation dataset); and the result's schema, known without running
    the numbering actor (it appends one int64 column)."""
    import ray.data

    schema = _schema(ds, "validation" if val else "training")
    if "id" in schema.names:
        kind = schema.types[schema.names.index("id")]
        if not pa.types.is_integer(kind):
            raise ConfigError([f"{FIELD}: the dataset's 'id' column is {kind}; ids must be "
                               f"unique integers (rename the column to let Feedline number "
                               f"the rows)"])
        return ds, schema
    ds.context.execution_options.preserve_order = True
    with warnings.catch_warnings():  # Ray 2.60 deprecates these two (removed in 2.64) but
        warnings.simplefilter("ignore", DeprecationWarning)  # names no replacement for them
        numbered = ds.map_batches(_ValPositions if val else _Positions, batch_size=None,
                                  batch_format="pyarrow", zero_copy_batch=True, num_cpus=0,
                                  compute=ray.data.ActorPoolStrategy(size=1), max_restarts=0,
                                  allow_out_of_order_execution=False)
    return numbered, _Schema([*schema.names, "id"], [*schema.types, pa.int64()])


class _Schema(NamedTuple):
    """The two things planning reads of a schema (Ray's ``Schema`` has these names too)."""

    names: list[str]
    types: list[Any]


def _columns(ds: Any, names: list[str]) -> dict[str, np.ndarray]:
    """The given columns of every row, on the driver (one pass)."""
    parts: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for batch in ds.select_columns(names).iter_batches(batch_size=None, batch_format="numpy"):
        for name in names:
            parts[name].append(np.asarray(batch[name]))
    return {n: np.concatenate(p) if p else np.empty(0, np.int64) for n, p in parts.items()}


def _ids_and_labels(given: Any, numbered: Any, labels: bool) -> dict[str, np.ndarray]:
    """Every row's id (and label) in one pass. Rows Feedline numbers are counted on the
    user's dataset itself, their ids being their positions: no numbering actor starts."""
    if numbered is given:
        return _columns(given, ["id", *(["label"] if labels else [])])
    if labels:
        seen = _columns(given, ["label"])
        return {"id": _Positions.FIRST + np.arange(len(seen["label"]), dtype=np.int64)} | seen
    return {"id": _Positions.FIRST + np.arange(given.count(), dtype=np.int64)}


def _input(source: RaySource, names: list[str]) -> str:
    if source.input:
        if source.input not in names:
            raise ConfigError([f"data.source.input ({source.input!r}) is not a column of the "
                               f"dataset ({', '.join(names)}); name one of them"])
        return source.input
    for name in ("image", "features"):
        if name in names:
            return name
    rest = [n for n in names if n not in ("id", "label")]
    if not rest:
        raise ConfigError([f"{FIELD}: the dataset has no column for the model to read "
                           f"({', '.join(names)})"])
    return rest[0]


def _schema(ds: Any, which: str) -> Any:
    """``ds``'s schema (Ray Data runs the dataset's first block for it), or a ConfigError for
    an empty dataset or a map of the user's that fails."""
    schema = _planning(lambda: ds.schema(), f"reading the {which} dataset's columns")
    if schema is None:
        raise ConfigError([f"{FIELD}: the {which} dataset has no rows (and so no columns); "
                           f"check the files it reads and the filters that may empty it"])
    return schema


def _planning(step: Any, doing: str) -> Any:
    """``step()``; a user's map that raises while Feedline plans becomes one ConfigError that
    names the function and its error, instead of Ray's traceback."""
    try:
        return step()
    except ConfigError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the user's code raised, through Ray
        ops = re.findall(r"\b((?:Map|MapBatches|FlatMap|Filter)\([^()]*\))", str(exc))
        where = f" in {ops[-1]}" if ops else ""
        # Ray wraps the user's error (UserCodeException, RayTaskError); its traceback text
        # keeps the original's last line
        raised = [m for m in re.findall(r"^(\w+(?:Error|Exception)): (.+)$", str(exc), re.M)
                  if m[0] not in ("UserCodeException", "RayTaskError")]
        kind, said = raised[-1] if raised else (type(exc).__name__,
                                                (str(exc).splitlines() or [""])[0])
        raise ConfigError([f"{FIELD}: your dataset failed{where} while Feedline was {doing} "
                           f"(planning, before any training): {kind}: {said.strip()}. "
                           f"Fix that function, or have it drop the rows it cannot handle "
                           f"(Feedline's own readers skip, count and quarantine bad samples)"]
                          ) from None


def _same_rows(ours_schema: Any, theirs_schema: Any, names: list[str]) -> None:
    """Refuse, before any training, a validation dataset whose rows the task could not read as
    it reads the training rows: a column missing, or of another type or shape."""
    theirs = dict(zip(theirs_schema.names, theirs_schema.types, strict=True))
    ours = dict(zip(ours_schema.names, ours_schema.types, strict=True))
    errors = [f"{FIELD}: the validation dataset has no {n!r} column (the training dataset's "
              f"is {ours[n]}); give both datasets the same columns"
              for n in names if n not in theirs]
    errors += [f"{FIELD}: the validation dataset's {n!r} column is {theirs[n]}, the training "
               f"dataset's is {ours[n]}; give both the same type and per-row shape"
               for n in names if n in theirs and theirs[n] != ours[n]]
    if errors:
        raise ConfigError(errors)


def row_shapes(schema: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """``column -> (per-row shape, bytes per row)`` from the training dataset's schema."""
    out = {}
    for name, kind in zip(schema.names, schema.types, strict=True):
        shape = tuple(getattr(kind, "shape", ()) or ())  # Ray's tensor columns have one
        if any(d is None for d in shape) or "VariableShaped" in type(kind).__name__:
            raise ConfigError([f"{FIELD}: column {name!r} holds rows of different shapes "
                               f"({kind}); pad or crop every row to one shape in your "
                               f"map_batches (a batch is one tensor per column)"])
        # Ray's tensor types name their element type ``scalar_type`` or (2.60's V2) ``value_type``
        scalar = getattr(kind, "scalar_type", None) or getattr(kind, "value_type", None) or kind
        dtype = np.dtype(scalar.to_pandas_dtype() if isinstance(scalar, pa.DataType) else scalar)
        if not (np.issubdtype(dtype, np.number) or dtype == np.bool_):
            raise ConfigError([f"{FIELD}: column {name!r} is {kind}; every column must be "
                               f"numeric (tokenise or decode in your map_batches)"])
        out[name] = (shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize)
    return out


def plan_ray(config: DataConfig, given: Any = None) -> dict[str, Any]:
    """The fields of a :class:`~pipeline.data.dataset.DataPlan` for a user's dataset."""
    source = config.source
    datasets, origin = user_datasets(source, given)
    train, schema = with_ids(datasets["train"])
    numbered = train is not datasets["train"]  # with_ids returns a dataset with its own ids
    shapes = row_shapes(schema)
    field = _input(source, list(shapes))
    labels = "label" in shapes
    seen = _planning(lambda: _ids_and_labels(datasets["train"], train, labels),
                     "counting its rows")
    ids = seen["id"]
    if "val" in datasets:
        val, val_schema = with_ids(datasets["val"], val=True)
        _same_rows(schema, val_schema, [field, *(["label"] if labels else [])])
        numbered = numbered or val is not datasets["val"]
        train_ids, num_val = ids, _planning(datasets["val"].count, "counting the validation rows")
    elif config.val_fraction > 0:
        is_val = validation_mask(ids, config.val_fraction, config.seed)
        train_ids, num_val = ids[~is_val], int(is_val.sum())
        val, train = (train.map_batches(_split, fn_args=(config.val_fraction, config.seed, side),
                                        batch_size=None, batch_format="pyarrow",
                                        zero_copy_batch=True) for side in (True, False))
    else:
        train_ids, num_val, val = ids, 0, None
    if len(np.unique(train_ids)) != len(train_ids):
        raise ConfigError([f"{FIELD}: the dataset's 'id' column repeats ids; ids must be unique "
                           f"(rename the column to let Feedline number the rows)"])
    if len(train_ids) == 0:
        raise ConfigError([f"{FIELD}: no training rows from {origin}"])
    labels = seen.get("label")
    classes = tuple(str(c) for c in range(int(labels.max()) + 1)) if labels is not None else ()
    return dict(train=train, val=val, classes=classes, field=field,
                sample_shape=shapes[field][0], num_train=len(train_ids), num_val=num_val,
                origin=f"ray dataset ({origin})", train_ids=train_ids,
                row_bytes=sum(b for _, b in shapes.values()),
                keep_order=numbered)
