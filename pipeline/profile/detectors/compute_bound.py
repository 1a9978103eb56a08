"""compute_bound: the model's own work (forward, backward, optimizer) is the largest cost of the
training phase and nothing waits beyond its threshold.

Not a fallback: it fires only when compute is larger than every other cost — input, start-up,
communication, copies, validation, reporting, checkpoints, and the unexplained time — and
:func:`pipeline.profile.diagnose` gives it only when no waiting detector fired and the named
phases explain the training phase.
"""

from __future__ import annotations

from pipeline.profile.detectors.base import Facts, Finding, as_int, change, current, pct

VERDICT = "compute_bound"


def detect(facts: Facts) -> Finding | None:
    share = facts.costs["compute"]
    if share <= 0 or any(v > share for c, v in facts.costs.items() if c != "compute"):
        return None
    workers = as_int(current(facts, "train.num_workers"))
    changes = []
    if workers is not None:
        more = f"raise `train.num_workers` from {workers} to {workers * 2}"
        changes.append(change("train.num_workers", workers * 2,
                              f"forward+backward+optimizer took {pct(share)} of the training "
                              f"phase and input, copies and gradients keep up"))
    else:
        more = "raise `train.num_workers`"
    advice = (f"compute-bound: forward+backward+optimizer took {pct(share)} of the training "
              f"phase and input, copies and gradients keep up → {more} (more GPUs), or make "
              f"each step cheaper (mixed precision, torch.compile)",)
    evidence = {"compute_cost": share}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=advice,
                   changes=tuple(changes))
