"""``"module:attribute"`` names in a config (a transform, a model factory, a task, a data
function) resolved to the callable they name, with errors that name the config field."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


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
