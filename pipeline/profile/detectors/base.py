"""What every bottleneck detector reads (:class:`Facts`) and returns (:class:`Finding`).

Detectors are pure functions ``detect(facts) -> Finding | None`` over plain numbers. Advice names
a config key and a value; when the context does not carry the current value, the advice says
what to change relative to the current one instead of inventing a number. ``Finding.changes``
holds the same advice for machines: ``{"key": dotted config key, "value": new value, "why"}``,
each valid for ``pipeline run --set key=value`` (values are JSON), only where the current value
is known (a relative "double it" has no exact value, so it yields no change).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline.profile._summary import PHASES
from pipeline.profile.config import ProfileConfig


@dataclass(frozen=True, kw_only=True)
class Facts:
    """The merged numbers a detector needs, computed once by :func:`diagnose`."""

    costs: Mapping[str, float]
    """Shares of the training phase by cost (``merged["training"]["costs"]``, see
    :mod:`pipeline.profile.merge`); they add up to 1."""
    fractions: Mapping[str, float]
    """Share of step time per step phase, averaged over ranks (the steady-state view)."""
    training: Mapping[str, Any]
    """``merged["training"]``: the training phase by phase, cost and epoch."""
    per_rank: Mapping[str, Mapping[str, Any]]
    """``merged["per_rank"]``: per-step seconds per phase, ``work_s`` and ``training`` per rank."""
    data_busy: float | None
    """Busy share of the busiest preprocessing operator's slots; None without stats."""
    data_operator: str | None
    """Name of that operator."""
    config: ProfileConfig
    context: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One detector's conclusion: how much of the training phase it explains, its numbers, its
    advice for people and its changes for ``pipeline tune``."""

    verdict: str
    share: float
    evidence: dict[str, Any]
    advice: tuple[str, ...]
    changes: tuple[dict[str, Any], ...] = ()


def pct(value: float) -> str:
    """0.413 → '41%'."""
    return f"{round(value * 100):.0f}%"


def change(key: str, value: Any, why: str, *, together: str = "") -> dict[str, Any]:
    """One machine-readable change: lists for tuples, so it is JSON and ``--set`` ready.
    Changes with the same ``together`` only help as one (``pipeline tune`` tries them so)."""
    value = list(value) if isinstance(value, tuple) else value
    return {"key": key, "value": value, "why": why, **({"together": together} if together else {})}


def current(facts: Facts, key: str) -> Any:
    """The current value of config ``key`` from the context, or None when it was not given."""
    return facts.context.get(key)


def as_int(value: Any) -> int | None:
    """``value`` when it is a plain integer (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def actors_that_fit(context: Mapping[str, Any]) -> int | None:
    """Decode actors the plan's preprocessing CPUs (``plan.data_cpus``) hold at
    ``data.cpus_per_actor``; None when the context lacks either."""
    cpus, per_actor = context.get("plan.data_cpus"), context.get("data.cpus_per_actor")
    if (not isinstance(cpus, (int, float)) or isinstance(cpus, bool)
            or not isinstance(per_actor, (int, float)) or per_actor <= 0):
        return None
    return max(1, math.floor(cpus / per_actor + 1e-9))


def step_share(facts: Facts) -> float:
    """Share of the training phase spent inside steps (mean over ranks)."""
    phases = facts.training.get("phases", {})
    return sum(phases.get(p, {}).get("share", 0.0) for p in PHASES)
