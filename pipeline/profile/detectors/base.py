"""What every bottleneck detector reads (:class:`Facts`) and returns (:class:`Finding`).

Detectors are pure functions ``detect(facts) -> Finding | None`` over plain numbers. Advice names
a config key and a value; when the context does not carry the current value, the advice says
what to change relative to the current one instead of inventing a number.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.profile.config import ProfileConfig


@dataclass(frozen=True, kw_only=True)
class Facts:
    """The merged numbers a detector needs, computed once by :func:`diagnose`."""

    fractions: Mapping[str, float]
    """Share of step time per phase, averaged over ranks."""
    per_rank: Mapping[str, Mapping[str, Any]]
    """``merged["per_rank"]``: per-step seconds per phase and ``work_s`` for each rank."""
    data_busy: float | None
    """Busy share of the busiest preprocessing operator's slots; None without stats."""
    data_operator: str | None
    """Name of that operator."""
    config: ProfileConfig
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One detector's conclusion: how much of the step it explains, its numbers, its advice."""

    verdict: str
    share: float
    evidence: dict[str, Any]
    advice: tuple[str, ...]


def pct(value: float) -> str:
    """0.413 → '41%'."""
    return f"{round(value * 100):.0f}%"


def current(facts: Facts, key: str) -> Any:
    """The current value of config ``key`` from the context, or None when it was not given."""
    return facts.context.get(key)


def raise_int(facts: Facts, key: str, new: int | None, *, what: str = "") -> str:
    """'`key` from 2 to 4' when the current value is known, else a relative suggestion."""
    label = f"`{key}`{' ' + what if what else ''}"
    if new is None:
        return f"{label} (double it)"
    now = current(facts, key)
    if isinstance(now, (list, tuple)):
        now = now[-1]
    return f"{label} from {now} to {new}"


def doubled(facts: Facts, key: str, *, index: int | None = None, at_least: int = 1) -> int | None:
    """Twice the current integer value of ``key`` (an item of it for [min, max] keys)."""
    now = current(facts, key)
    if isinstance(now, (list, tuple)) and index is not None:
        now = now[index]
    if not isinstance(now, (int, float)) or isinstance(now, bool):
        return None
    return max(int(now) * 2, at_least)
