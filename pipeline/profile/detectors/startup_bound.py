"""startup_bound: epochs spend more than ``startup_bound_fraction`` of the training phase waiting
for their first batch.

Each epoch that reads through Ray Data starts its pipeline again (actors, first blocks), and
short epochs pay that start-up more often than they train. The start-up cost also counts the
all-reduce time a rank spent in its first step waiting for a peer whose start-up was longer.

The remedy depends on whether the start-up repeats. When the epochs after the first pay
together at least half the first epoch's start-up, the decoded samples are not being reused:
``data.cache: memory`` keeps each rank's decoded shard so later epochs replay it instead of
restarting Ray Data and decoding again (validation, decoded again every epoch without it,
replays too). That removes the repeated start-up *and* the repeated decoding, so it comes first. A
saturated decode pool (busy at least ``data_busy_fraction``) makes every decoding epoch's first
blocks wait for it: more actors come next (with the cache on, they still speed up the epoch that
decodes, which is all the start-up that is left). When only the first epoch pays it and the pool
is not saturated, it is the price of the run itself: fewer, longer runs (more epochs per run,
fewer restarts) amortise it; no config key removes it.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, as_int, change, current, pct

VERDICT = "startup_bound"

# Later epochs paying together at least this share of the first epoch's start-up: it repeats.
_REPEATS = 0.5
# Validation above this share of the training phase is named with a repeating start-up.
_VALIDATION_NOTABLE = 0.2


def detect(facts: Facts) -> Finding | None:
    share = facts.costs["startup"]
    if share <= facts.config.startup_bound_fraction:
        return None
    per_epoch = {label: e["shares"]["startup"] * e["wall_s"]
                 for label, e in facts.training.get("epochs", {}).items()}
    labels = list(per_epoch)
    first = per_epoch[labels[0]] if labels else 0.0
    later = [per_epoch[k] for k in labels[1:]]
    later_mean = sum(later) / len(later) if later else 0.0
    repeats = bool(later) and sum(later) >= _REPEATS * first
    head = (f"startup-bound: waiting for each epoch's first batch took {pct(share)} of the "
            f"training phase (first epoch {first:.2f} s"
            + (f", later epochs {later_mean:.2f} s each on average)" if later else ")"))
    evidence = {"startup_fraction": share, "startup_first_epoch_s": first,
                "startup_later_epochs_mean_s": later_mean if later else None,
                "startup_repeats": repeats, "startup_by_epoch_s": per_epoch,
                "profile.startup_bound_fraction": facts.config.startup_bound_fraction}
    cache = current(facts, "data.cache")
    if cache is False:  # YAML 1.1 reads a bare `off` as false
        cache = "off"
    changes = []
    saturated = facts.data_busy is not None and facts.data_busy >= facts.config.data_busy_fraction
    more = _more_actors(facts) if saturated else None
    if repeats and cache in ("off", "auto", None):
        now = f" (now {cache})" if cache is not None else ""
        fix = (f"set `data.cache: memory`{now} so every epoch after the first replays the "
               f"decoded samples instead of restarting Ray Data")
        validation = facts.costs.get("validation", 0.0)
        if validation > _VALIDATION_NOTABLE:
            fix += (f" (validation, {pct(validation)} of the training phase, decodes its "
                    f"samples again every epoch and replays them from the cache too)")
        changes.append(change("data.cache", "memory",
                              f"every epoch restarts Ray Data: {later_mean:.2f} s per epoch "
                              f"before its first batch, {pct(share)} of the training phase"))
    elif repeats:
        fix = (f"the start-up repeats although `data.cache` is {cache}: check that the cache "
               f"holds the shard (memory, disk space) and `pipeline doctor`")
    else:
        fix = ("only the first epoch pays it, so it is the run's own start-up: run more epochs "
               "per job (a larger `train.epochs` in fewer, longer runs; fewer restarts) to "
               "amortise it")
    if more is not None:  # each decoding epoch's first blocks wait for a pool that is full
        evidence["data_saturated"] = True
        changes.append(more)
        busy = (f"preprocessing actors were busy {pct(facts.data_busy)} of the time, so every "
                f"decoding epoch's first blocks wait for a full pool")
        fix = (f"{fix}; {busy}: then raise `data.concurrency` to {more['value']}" if repeats
               else f"{busy}: raise `data.concurrency` to {more['value']}; beyond that, {fix}")
    advice = (f"{head} → {fix}",)
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice,
                   changes=tuple(changes))


def _more_actors(facts: Facts) -> dict | None:
    """Twice the decode pool's max (at least one more actor), or None when it is unknown."""
    conc = current(facts, "data.concurrency")
    low, high = (conc[0], conc[-1]) if isinstance(conc, (list, tuple)) else (1, conc)
    high = as_int(high)
    if high is None:
        return None
    return change("data.concurrency", [as_int(low) or 1, max(high + 1, 2 * high)],
                  f"the decode pool was busy {pct(facts.data_busy or 0)} of the time while "
                  f"every epoch waited for its first batch")
