"""inconclusive: not enough evidence for a verdict, and where the missing evidence sits.

Two cases, both decided by :func:`pipeline.profile.diagnose`:

- *unexplained*: the named phases explain less than ``profile.min_explained_fraction`` of the
  training phase. The rest is ``other`` (inside steps, outside the named spans: host syncs such
  as ``loss.item()``, logging, per-step callbacks) or ``untracked`` (outside steps and outside
  start-up, validation, reporting and checkpoints: code between epochs). The finding names that
  share, which of the two holds most of it, and the ranks and epochs where it is largest.
- *no dominant cost*: the time is explained, no waiting cost passed its threshold and compute is
  not the largest cost (e.g. validation is). The finding names the largest cost.

Neither names a config change: there is nothing yet to tune.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, pct

VERDICT = "inconclusive"

# Ranks and epochs named in the advice: the largest few.
_NAMED = 3


def unexplained(facts: Facts) -> Finding | None:
    """The finding when the named phases explain too little of the training phase."""
    share = facts.costs["unexplained"]
    explained = 1.0 - share
    if explained >= facts.config.min_explained_fraction:
        return None
    phases = facts.training.get("phases", {})
    by_phase = {p: phases.get(p, {}).get("share", 0.0) for p in ("other", "untracked")}
    where = max(by_phase, key=lambda p: by_phase[p])
    by_rank = {k: r["training"]["costs"]["unexplained"] for k, r in facts.per_rank.items()}
    ranks = sorted(by_rank, key=lambda k: (-by_rank[k], int(k)))[:_NAMED]
    epochs = facts.training.get("epochs", {})
    by_epoch = {label: e["shares"]["other"] + e["shares"]["untracked"]
                for label, e in epochs.items()}
    top_epochs = sorted(by_epoch, key=lambda k: -by_epoch[k])[:_NAMED]
    named = {c: v for c, v in facts.costs.items() if c != "unexplained"}
    lead = max(named, key=lambda c: named[c]) if named else None
    inside = where == "other"
    place = ("`other`: inside steps, outside the named spans" if inside else
             "`untracked`: outside steps and outside start-up, validation, report and "
             "checkpoint")
    look = ("time the loop body between the optimizer step and the next batch (host syncs such "
            "as loss.item(), logging, per-step callbacks)" if inside else
            "time the code between epochs that no phase covers")
    rank_text = ", ".join(f"rank {k} ({pct(by_rank[k])})" for k in ranks)
    epoch_text = ", ".join(f"{k} ({pct(by_epoch[k])})" for k in top_epochs)
    advice = (f"inconclusive: the named phases explain only {pct(explained)} of the training "
              f"phase (a verdict needs {pct(facts.config.min_explained_fraction)}); the "
              f"unexplained {pct(share)} is mostly {place}; on {rank_text}"
              + (f"; largest in epochs {epoch_text}" if epoch_text else "")
              + f" → {look}"
              + (f"; the largest named cost is {lead} ({pct(named[lead])})" if lead else ""),)
    evidence = {"reason": "unexplained", "explained_fraction": explained,
                "unexplained_fraction": share, "unexplained_phase": where,
                "unexplained_by_phase": by_phase, "unexplained_by_rank": by_rank,
                "unexplained_by_epoch": by_epoch, "largest_named_cost": lead,
                "profile.min_explained_fraction": facts.config.min_explained_fraction}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice)


def no_dominant(facts: Facts) -> Finding:
    """The finding when the time is explained but no verdict's rule holds."""
    named = {c: v for c, v in facts.costs.items() if c != "unexplained"}
    lead = max(named, key=lambda c: named[c])
    advice = (f"inconclusive: the named phases explain {pct(1 - facts.costs['unexplained'])} "
              f"of the training phase but no bottleneck passes its threshold; the largest cost "
              f"is {lead} ({pct(named[lead])}), then "
              + ", ".join(f"{c} ({pct(v)})" for c, v in sorted(
                  named.items(), key=lambda kv: -kv[1])[1:_NAMED + 1]),)
    evidence = {"reason": "no_dominant_cost", "largest_cost": lead,
                "explained_fraction": 1 - facts.costs["unexplained"]}
    return Finding(verdict=VERDICT, share=named[lead], evidence=evidence, advice=advice)
