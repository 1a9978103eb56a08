"""Synthetic per-rank summaries built with the real summariser, for the pure profile tests."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from pipeline.profile._summary import MEASURED_PHASES, summarise

# A healthy step: mostly compute, a little of everything else (seconds per step).
BALANCED = {"data_wait": 0.01, "h2d": 0.005, "forward": 0.04, "backward": 0.08,
            "comm_exposed": 0.01, "optimizer": 0.01, "other": 0.005}


def rank_summary(rank: int, per_step: Mapping[str, float], *, steps: int = 20,
                 samples_per_step: int = 32) -> dict:
    """An epoch summary whose every step spends ``per_step[phase]`` seconds in each phase."""
    values = {**dict.fromkeys(MEASURED_PHASES, 0.0), "other": 0.0, **per_step}
    wall = sum(values.values())
    return summarise(rank=rank, walls=[wall] * steps,
                     phases={p: [v] * steps for p, v in values.items()},
                     samples=samples_per_step * steps)


@pytest.fixture
def make_ranks() -> Callable[..., dict[int, dict]]:
    """``make_ranks(n, **overrides)`` → ``{rank: summary}``; ``slow={rank: {phase: s}}`` changes
    single ranks."""

    def build(n: int = 2, slow: Mapping[int, Mapping[str, float]] | None = None,
              **per_step: float) -> dict[int, dict]:
        out = {}
        for rank in range(n):
            values = {**BALANCED, **per_step, **(slow or {}).get(rank, {})}
            out[rank] = rank_summary(rank, values)
        return out

    return build
