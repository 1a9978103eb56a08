"""compute_bound: the fallback — nothing waits beyond its threshold, the model's work dominates.

It always returns a finding; :func:`pipeline.profile.diagnose` uses it only when no other
detector fires. A large ``other`` share (untracked time: logging, checkpoints, host syncs such as
``loss.item()``) is called out, since speeding up the model would not help there.
"""

from __future__ import annotations

from pipeline.profile._summary import COMPUTE_PHASES
from pipeline.profile.detectors.base import Facts, Finding, current, pct

VERDICT = "compute_bound"

# `other` above this share of a step earns its own line of advice.
_OTHER_NOTABLE = 0.3


def detect(facts: Facts) -> Finding:
    share = sum(facts.fractions[p] for p in COMPUTE_PHASES)
    other = facts.fractions["other"]
    workers = current(facts, "train.num_workers")
    if isinstance(workers, int) and not isinstance(workers, bool):
        more = f"raise `train.num_workers` from {workers} to {workers * 2}"
    else:
        more = "raise `train.num_workers`"
    advice = [f"compute-bound: forward+backward+optimizer took {pct(share)} of each step and "
              f"input, copies and gradients keep up → {more} (more GPUs), or make each step "
              f"cheaper (mixed precision, torch.compile)"]
    if other > _OTHER_NOTABLE:
        advice.append(f"{pct(other)} of each step is outside the named phases (logging, "
                      f"checkpoints, host syncs such as loss.item()); profile the loop body")
    evidence = {"compute_fraction": share, "other_fraction": other}
    return Finding(verdict=VERDICT, share=share, evidence=evidence, advice=tuple(advice))
