"""input_bound: trainers wait for the next batch for more than ``input_bound_fraction`` of a step.

The advice depends on the preprocessing side. Busy actors (at least ``data_busy_fraction`` of
their slots) mean preprocessing lacks capacity: more actors, sized so their output covers the
wait (if trainers wait a share *w* of each step, preprocessing delivers 1 − *w* of the needed
rate, so the pool needs ×1/(1 − *w*), at least one more actor, at most ×4 per try). Idle actors
with waiting trainers mean batches are not ready ahead of the trainer: deeper prefetch.
"""

from __future__ import annotations

import math

from pipeline.profile.detectors.base import Facts, Finding, current, pct

VERDICT = "input_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.fractions["data_wait"]
    if share <= facts.config.input_bound_fraction:
        return None
    head = f"input-bound: trainers waited {pct(share)} of each step"
    evidence = {"data_wait_fraction": share,
                "profile.input_bound_fraction": facts.config.input_bound_fraction}
    conc = current(facts, "data.concurrency")
    conc_max = conc[-1] if isinstance(conc, (list, tuple)) else conc
    if isinstance(conc_max, int) and not isinstance(conc_max, bool):
        factor = min(4.0, 1.0 / max(1e-9, 1.0 - share))
        target = max(conc_max + 1, math.ceil(conc_max * factor))
        more_actors = f"raise `data.concurrency` max from {conc_max} to {target}"
    else:
        more_actors = "raise the `data.concurrency` max (e.g. double it)"
    prefetch = current(facts, "data.prefetch_batches")
    if isinstance(prefetch, int) and not isinstance(prefetch, bool):
        deeper = f"raise `data.prefetch_batches` from {prefetch} to {max(prefetch * 2, 2)}"
    else:
        deeper = "raise `data.prefetch_batches` (e.g. double it)"
    if facts.data_busy is None:
        advice = (f"{head}; no preprocessing stats were collected → {more_actors} or add CPU "
                  f"nodes if the preprocessing actors are saturated, otherwise {deeper}",)
    elif facts.data_busy >= facts.config.data_busy_fraction:
        evidence["data_saturated"] = True
        advice = (f"{head}; preprocessing actors were busy {pct(facts.data_busy)} of the time "
                  f"→ {more_actors} or add CPU nodes",)
    else:
        evidence["data_saturated"] = False
        advice = (f"{head} while preprocessing actors were busy only {pct(facts.data_busy)} of "
                  f"the time, so they are not the limit → {deeper} so batches are ready "
                  f"before the trainer asks",)
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice)
