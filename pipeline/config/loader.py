"""Turn plain YAML data into frozen config dataclasses, collecting every error with its path.

The loader walks a dataclass's type hints: nested dataclasses become sections, a union of
dataclasses with a ``kind`` field is a tagged choice (``data.source: {kind: parquet, ...}``),
``Literal`` lists the allowed words, ``tuple[int, ...]`` accepts YAML lists. Every problem is
reported as ``dotted.path: message`` and all of them are collected before raising, so
``pipeline validate`` can print them together.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

import yaml

from pipeline.config.options import bound_errors
from pipeline.errors import ConfigError


def parse(cls: type, data: Any, path: str = "") -> Any:
    """Build ``cls`` from ``data`` or raise :class:`ConfigError` listing every problem."""
    errors: list[str] = []
    value = _convert(cls, data, path, errors)
    if errors:
        raise ConfigError(errors)
    return value


# a number in exponent notation without the dot YAML 1.1 needs to make it a float
_EXPONENT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)[eE][+-]?\d+")


def apply_overrides(data: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """Apply ``a.b.c=value`` overrides (values parsed as YAML) to a copy of ``data``.

    Overriding a ``kind`` starts that section afresh, so ``--set data.source.kind=parquet``
    does not inherit the image folder's fields from the file.
    """
    out = _deep_copy(data)
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError([f"--set {item!r}: expected KEY=VALUE, e.g. train.epochs=3"])
        parts = key.strip().split(".")
        node = out
        for part in parts[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError as exc:
            problem = getattr(exc, "problem", None) or type(exc).__name__
            raise ConfigError([f"--set {item!r}: the value {raw!r} is not valid YAML ({problem}); "
                               f"write a list as [1, 2], a mapping as {{k: v}}, and quote a string "
                               f"holding ': ', brackets or braces"]) from exc
        if parts[-1] == "kind" and node.get("kind") != value:
            node.clear()
        node[parts[-1]] = value
    return out


def describe(cls: type, prefix: str = "") -> list[tuple[str, str, str]]:
    """``(dotted name, default, doc)`` for every field, for help text and docs."""
    rows = []
    for f in dataclasses.fields(cls):
        name = f"{prefix}{f.name}"
        hint = typing.get_type_hints(cls)[f.name]
        if dataclasses.is_dataclass(hint):
            rows.extend(describe(hint, name + "."))
            continue
        default = f.default if f.default is not dataclasses.MISSING else "(required)"
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
            default = getattr(default, "kind", default)
        rows.append((name, str(default), f.metadata.get("doc", "")))
    return rows


# --------------------------------------------------------------------------------------------


def _deep_copy(data: Any) -> Any:
    if isinstance(data, dict):
        return {k: _deep_copy(v) for k, v in data.items()}
    if isinstance(data, list):
        return [_deep_copy(v) for v in data]
    return data


def _where(path: str) -> str:
    return path or "<config>"


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " | ".join(repr(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(hint))
    if typing.get_origin(hint) is tuple:
        return "a list"
    if dataclasses.is_dataclass(hint):
        return "a mapping"
    return getattr(hint, "__name__", str(hint))


def _convert(hint: Any, value: Any, path: str, errors: list[str]) -> Any:
    origin = typing.get_origin(hint)
    if dataclasses.is_dataclass(hint):
        return _build(hint, value, path, errors)
    if origin in (Union, types.UnionType):
        return _convert_union(hint, value, path, errors)
    if origin is Literal:
        allowed = typing.get_args(hint)
        if value in allowed:
            return value
        close = difflib.get_close_matches(str(value), [str(a) for a in allowed], n=1)
        tip = f"; did you mean {close[0]}?" if close else ""
        choices = ", ".join(map(str, allowed))
        errors.append(f"{_where(path)}: {value!r} is not one of {choices}{tip}")
        return None
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        if not isinstance(value, Mapping):
            errors.append(f"{_where(path)}: expected a mapping, got {value!r}")
            return None
        return {_convert(key_type, k, f"{path}.<key {k!r}>", errors):
                _convert(value_type, v, f"{path}.{k}", errors) for k, v in value.items()}
    if origin is tuple:
        args = typing.get_args(hint)
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            errors.append(f"{_where(path)}: expected a list, got {value!r}")
            return None
        if len(args) == 2 and args[1] is Ellipsis:
            items = [(args[0], v) for v in value]
        elif len(args) != len(value):
            errors.append(f"{_where(path)}: expected {len(args)} items, got {len(value)} "
                          f"({value!r})")
            return None
        else:
            items = list(zip(args, value, strict=True))
        return tuple(_convert(t, v, f"{path}[{i}]", errors) for i, (t, v) in enumerate(items))
    if hint is Any:
        return value
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if hint is float and isinstance(value, str) and _EXPONENT.fullmatch(value.strip()):
        return float(value)  # YAML 1.1 reads 3e-4 and 1e6 (no dot) as strings
    if hint in (int, float, str, bool):
        if isinstance(value, hint) and not (hint is int and isinstance(value, bool)):
            return value
        errors.append(f"{_where(path)}: expected {hint.__name__}, got {value!r} "
                      f"({type(value).__name__})")
        return None
    raise TypeError(f"config type {hint!r} at {path} is not supported by the loader")


def _convert_union(hint: Any, value: Any, path: str, errors: list[str]) -> Any:
    args = typing.get_args(hint)
    if value is None and type(None) in args:
        return None
    sections = [a for a in args if dataclasses.is_dataclass(a)]
    if sections:
        return _convert_tagged(sections, value, path, errors)
    for arg in args:
        if arg is type(None):
            continue
        trial: list[str] = []
        converted = _convert(arg, value, path, trial)
        if not trial:
            return converted
    errors.append(f"{_where(path)}: expected {_type_name(hint)}, got {value!r}")
    return None


def _convert_tagged(sections: list[type], value: Any, path: str, errors: list[str]) -> Any:
    kinds = {s.__dataclass_fields__["kind"].default: s for s in sections}
    if not isinstance(value, Mapping):
        errors.append(f"{_where(path)}: expected a mapping with 'kind' ({', '.join(kinds)}), "
                      f"got {value!r}")
        return None
    kind = value.get("kind")
    if kind not in kinds:
        close = difflib.get_close_matches(str(kind), list(kinds), n=1)
        tip = f"; did you mean {close[0]}?" if close else ""
        errors.append(f"{path}.kind: {kind!r} is not one of {', '.join(kinds)}{tip}")
        return None
    return _build(kinds[kind], value, path, errors)


def _build(cls: type, value: Any, path: str, errors: list[str]) -> Any:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        errors.append(f"{_where(path)}: expected a mapping, got {value!r}")
        return None
    fields = {f.name: f for f in dataclasses.fields(cls)}
    prefix = f"{path}." if path else ""
    for key in value:
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1, cutoff=0.6)
            tip = f"; did you mean {close[0]}?" if close else f"; known fields: {', '.join(fields)}"
            errors.append(f"{prefix}{key}: unknown field{tip}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    before = len(errors)
    for name, f in fields.items():
        if name in value:
            converted = _convert(hints[name], value[name], prefix + name, errors)
            errors.extend(f"{prefix}{m}" for m in bound_errors(name, converted, dict(f.metadata)))
            kwargs[name] = converted
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            doc = f.metadata.get("doc", "")
            errors.append(f"{prefix}{name}: required field is missing ({doc})")
    if len(errors) > before:
        return None
    obj = cls(**kwargs)
    check = getattr(obj, "check", None)
    if check is not None:
        errors.extend(f"{prefix}{m}" for m in check())
    return obj
