"""input_bound: trainers wait for their next batch more than ``input_bound_fraction`` of the
training phase.

The input cost is judged per rank: a rank's own ``data_wait`` plus the all-reduce time it spent
waiting for a peer that was still waiting for its batch (step by step, see
:mod:`pipeline.profile.merge`), so at every step it is the slowest rank's wait — what the whole
job waited for.

The advice depends on the preprocessing side. Busy actors (at least ``data_busy_fraction`` of
their slots), or no stats, mean preprocessing lacks capacity: more actors, sized so their output
covers the wait (if trainers wait a share *w* of their step time, preprocessing delivers 1 − *w*
of the needed rate, so the pool needs ×1/(1 − *w*), at least one more actor, at most ×4 per
try). Idle actors with waiting trainers mean batches are not ready ahead of the trainer: deeper
prefetch.
"""

from __future__ import annotations

import math

from pipeline.profile.detectors.base import (
    Facts,
    Finding,
    as_int,
    change,
    current,
    pct,
    step_share,
)

VERDICT = "input_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.costs["input"]
    if share <= facts.config.input_bound_fraction:
        return None
    # The share of step time the trainers waited: what sets the rate preprocessing must reach.
    in_steps = step_share(facts)
    wait = min(0.95, share / in_steps) if in_steps > 0 else share
    by_rank = {k: r["training"]["costs"]["input"] for k, r in facts.per_rank.items()}
    slowest = max(by_rank, key=lambda k: (by_rank[k], -int(k)))
    head = f"input-bound: trainers waited for input {pct(share)} of the training phase"
    if pct(wait) != pct(share):
        head += f" ({pct(wait)} of their step time)"
    evidence = {"input_fraction": share, "input_step_fraction": wait,
                "input_by_rank": by_rank, "slowest_input_rank": int(slowest),
                "profile.input_bound_fraction": facts.config.input_bound_fraction}
    conc = current(facts, "data.concurrency")
    low, high = (conc[0], conc[-1]) if isinstance(conc, (list, tuple)) else (None, conc)
    high, low = as_int(high), as_int(low)
    more: dict | None = None
    if high is not None:
        factor = min(4.0, 1.0 / max(1e-9, 1.0 - wait))
        target = max(high + 1, math.ceil(high * factor))
        more_actors = f"raise `data.concurrency` max from {high} to {target}"
        more = change("data.concurrency", [low if low is not None else 1, target],
                      f"trainers waited {pct(wait)} of their step time: preprocessing delivers "
                      f"about {pct(1 - wait)} of the rate they need, so ×{factor:.2g} actors")
    elif current(facts, "data.source.kind") == "ray":
        more_actors = ("give your dataset's slowest map more workers (its "
                       "`map_batches(concurrency=...)`)")
    else:
        more_actors = "raise the `data.concurrency` max (e.g. double it)"
    prefetch = as_int(current(facts, "transfer.host_prefetch"))
    deeper_change: dict | None = None
    if prefetch is not None:
        deeper = f"raise `transfer.host_prefetch` from {prefetch} to {max(prefetch * 2, 2)}"
        deeper_change = change("transfer.host_prefetch", max(prefetch * 2, 2),
                               "preprocessing has spare capacity but batches are not ready "
                               "when the trainer asks")
    else:
        deeper = "raise `transfer.host_prefetch` (e.g. double it)"
    if facts.data_busy is None:
        advice = (f"{head}; no preprocessing stats were collected → {more_actors} or add CPU "
                  f"nodes if the preprocessing actors are saturated, otherwise {deeper}",)
        changes = [c for c in (more, deeper_change) if c is not None]
    elif facts.data_busy >= facts.config.data_busy_fraction:
        evidence["data_saturated"] = True
        advice = (f"{head}; preprocessing actors were busy {pct(facts.data_busy)} of the time "
                  f"→ {more_actors} or add CPU nodes",)
        changes = [more] if more is not None else []
    else:
        evidence["data_saturated"] = False
        advice = (f"{head} while preprocessing actors were busy only {pct(facts.data_busy)} of "
                  f"the time, so they are not the limit → {deeper} so batches are ready "
                  f"before the trainer asks",)
        changes = [deeper_change] if deeper_change is not None else []
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice,
                   changes=tuple(changes))
