"""Declaring config fields: a default, a one-line doc and the checks a value must pass.

Components declare their frozen, keyword-only config dataclass next to themselves and mark each
field with :func:`option`. The loader in :mod:`pipeline.config.loader` reads the metadata to
validate values and to name the remedy; nothing here touches YAML, Ray or torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any


def option(
    default: Any,
    doc: str,
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    hint: str = "",
) -> Any:
    """A dataclass field with a doc line and bounds checked by the loader.

    ``hint`` is appended to a bound violation, e.g. ``"use 1 to disable overlap"``.
    Bounds apply to numbers and to each number inside a tuple.
    """
    metadata = {"doc": doc, "ge": ge, "gt": gt, "le": le, "lt": lt, "hint": hint}
    return dataclasses.field(default=default, metadata=metadata)


def required(doc: str, **bounds: Any) -> Any:
    """A field without a default: the user must set it."""
    field = option(dataclasses.MISSING, doc, **bounds)
    return field


def bound_errors(name: str, value: Any, metadata: dict[str, Any]) -> list[str]:
    """Messages for every bound in ``metadata`` that ``value`` breaks (empty when fine)."""
    values = value if isinstance(value, tuple) else (value,)
    out = []
    checks = (("ge", ">=", lambda v, b: v >= b), ("gt", ">", lambda v, b: v > b),
              ("le", "<=", lambda v, b: v <= b), ("lt", "<", lambda v, b: v < b))
    for v in values:
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        for key, sign, ok in checks:
            bound = metadata.get(key)
            if bound is not None and not ok(v, bound):
                hint = metadata.get("hint") or ""
                remedy = f"; {hint}" if hint else ""
                out.append(f"{name} ({value!r}) must be {sign} {bound}{remedy}")
                break
    return out
