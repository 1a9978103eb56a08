"""Strict JSON for every file a run writes: a non-finite float (a diverged loss) becomes
``null`` instead of the bare ``NaN`` that ``json.dumps`` writes and no other JSON reader takes,
and whole files are replaced atomically, so a crash mid-write never leaves half a summary."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (NaN, ±inf) replaced by None, containers walked."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """Strict JSON text of ``value`` (see :func:`finite`)."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)


def write(path: Path, value: Any, **kwargs: Any) -> None:
    """Write ``value`` as strict JSON to ``path``, atomically (a temporary file renamed over it)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(dumps(value, **kwargs))
    except OSError:  # a full disk: leave neither half a file nor an empty one behind
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
