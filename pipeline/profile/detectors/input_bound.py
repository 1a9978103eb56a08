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

More actors only help if the plan's preprocessing CPUs (``plan.data_cpus`` in the context) hold
them: the advice never raises a max they cannot. When the CPUs, not the max, hold the pool, it
names what can work, in order of expected gain: the cache when epochs decode again; more actors
per CPU when the actors wait rather than compute (their CPU time, ``pool.decode_cpu_share``,
below :data:`WAITING_BELOW` of their busy time); CPU nodes, with the CPUs needed.
"""

from __future__ import annotations

import math

from pipeline.profile.detectors.base import (
    Facts,
    Finding,
    actors_that_fit,
    as_int,
    change,
    current,
    pct,
    step_share,
)

VERDICT = "input_bound"
#: decode actors whose CPU time is below this share of their busy time wait rather than compute
WAITING_BELOW = 0.5


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
                "decode_cpu_share": current(facts, "pool.decode_cpu_share"),
                "input_by_rank": by_rank, "slowest_input_rank": int(slowest),
                "profile.input_bound_fraction": facts.config.input_bound_fraction}
    conc = current(facts, "data.concurrency")
    low, high = (conc[0], conc[-1]) if isinstance(conc, (list, tuple)) else (None, conc)
    high, low = as_int(high), as_int(low)
    more: dict | None = None
    budget: tuple[str, list[dict]] | None = None
    if high is not None:
        factor = min(4.0, 1.0 / max(1e-9, 1.0 - wait))
        target = max(high + 1, math.ceil(high * factor))
        fits = actors_that_fit(facts.context)
        if fits is not None and fits < target:
            evidence["plan_data_cpus"], evidence["actors_that_fit"] = _data_cpus(facts), fits
        if fits is not None and fits <= high:  # the CPUs, not the pool's max, hold it back
            budget = _within_budget(facts, high, target, fits)
            more_actors = budget[0]
        else:
            target = min(target, fits) if fits is not None else target
            more_actors = f"raise `data.concurrency` max from {high} to {target}"
            more = change("data.concurrency", [low if low is not None else 1, target],
                          f"trainers waited {pct(wait)} of their step time: preprocessing "
                          f"delivers about {pct(1 - wait)} of the rate they need, so "
                          f"×{factor:.2g} actors" + (f" ({target} fit the plan's CPUs)"
                                                      if fits == target else ""))
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
    grow = budget[1] if budget is not None else [more] if more is not None else []
    nodes = "" if budget is not None else " or add CPU nodes"
    if facts.data_busy is None:
        advice = (f"{head}; no preprocessing stats were collected → {more_actors}{nodes} if "
                  f"the preprocessing actors are saturated, otherwise {deeper}",)
        changes = [*grow, *([deeper_change] if deeper_change is not None else [])]
    elif facts.data_busy >= facts.config.data_busy_fraction:
        evidence["data_saturated"] = True
        advice = (f"{head}; preprocessing actors were busy {pct(facts.data_busy)} of the time "
                  f"→ {more_actors}{nodes}",)
        changes = grow
    else:
        evidence["data_saturated"] = False
        advice = (f"{head} while preprocessing actors were busy only {pct(facts.data_busy)} of "
                  f"the time, so they are not the limit → {deeper} so batches are ready "
                  f"before the trainer asks",)
        changes = [deeper_change] if deeper_change is not None else []
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice,
                   changes=tuple(changes))


def _data_cpus(facts: Facts) -> float | None:
    cpus = current(facts, "plan.data_cpus")
    return float(cpus) if isinstance(cpus, (int, float)) and not isinstance(cpus, bool) else None


def _within_budget(facts: Facts, high: int, target: int,
                   fits: int) -> tuple[str, list[dict]]:
    """When the plan's CPUs, not ``data.concurrency``'s max, hold the pool: what can work, in
    order of expected gain (the cache when epochs decode again; more actors per CPU, which
    helps actors that wait on I/O rather than compute; CPU nodes), as advice and changes."""
    cpus, per_actor = _data_cpus(facts), current(facts, "data.cpus_per_actor")
    said = (f"the plan gives preprocessing {cpus:g} CPU(s), room for {fits} actor(s) at "
            f"`data.cpus_per_actor` {per_actor:g}, so a larger `data.concurrency` max cannot "
            f"help")
    remedies, changes = [], []
    if current(facts, "data.cache") == "off" and (current(facts, "train.epochs") or 1) > 1:
        remedies.append("set `data.cache: memory` (every epoch decodes again; cached, only "
                        "the first does)")
        changes.append(change("data.cache", "memory", "every epoch re-decodes its samples; the "
                              "cache decodes once and replays the rest"))
    # a max above what fits: room for that max is enough; at the max already: room for more
    actors = high if high > fits else target
    smaller = math.floor(100 * cpus / actors) / 100 if cpus else 0.0
    cpu = current(facts, "pool.decode_cpu_share")
    computing = cpu is not None and cpu >= WAITING_BELOW
    if 0 < smaller < per_actor and not computing:
        also = "" if high > fits else f" and the `data.concurrency` max to {target}"
        why = ("if the actors wait on I/O rather than compute" if cpu is None else
               f"the actors used {pct(cpu)} of a CPU while decoding: they wait (I/O, sleeps), so")
        remedies.append(f"{why}, set `data.cpus_per_actor` to {smaller:g}{also} so {actors} "
                        f"fit")
        # more actors per CPU helps only with a max that lets the pool hold them: one change
        changes.append(change("data.cpus_per_actor", smaller,
                              f"{fits} actor(s) fit the plan's {cpus:g} preprocessing CPU(s); "
                              f"{actors} at {smaller:g} CPU each", together="actors per CPU"))
        if high <= fits:
            low = current(facts, "data.concurrency")[0]
            changes.append(change("data.concurrency", [low, target],
                                  f"{target} actors at {smaller:g} CPU each",
                                  together="actors per CPU"))
    needed = math.ceil(actors * per_actor - cpus) if cpus is not None else None
    if needed:
        remedies.append(f"add CPU nodes with {needed} more CPU(s) for preprocessing "
                        f"(`data.placement`)")
    if computing:
        said += (f"; the actors used {pct(cpu)} of a CPU while decoding: they compute, so only "
                 f"more CPUs (or decoding less) help")
    return f"{said}: {'; or '.join(remedies)}", changes
