"""YAML at the edge, frozen dataclasses everywhere else.

Components import :func:`option` from here to declare their own config next to themselves, and
the root :class:`Config` imports those components, so the root names load on first use to keep
that import cycle-free.
"""

from typing import Any

from pipeline.config.loader import ConfigError, describe
from pipeline.config.options import option, required

__all__ = [
    "Config",
    "ConfigError",
    "RunSection",
    "describe",
    "load_config",
    "option",
    "read_yaml",
    "required",
    "to_dict",
]

_ROOT = ("Config", "RunSection", "load_config", "read_yaml", "to_dict")


def __getattr__(name: str) -> Any:
    if name in _ROOT:
        from pipeline.config import root

        return getattr(root, name)
    raise AttributeError(f"module 'pipeline.config' has no attribute {name!r}")
