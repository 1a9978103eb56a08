"""Bottleneck detectors, one file per verdict, in the order used to break ties.

Each module has ``VERDICT`` and ``detect(facts) -> Finding | None``; the ordering and borderline
rules that pick one verdict live in :mod:`pipeline.profile.diagnosis`. :mod:`.inconclusive` is not
a detector: the diagnosis turns to it when the evidence does not support one.
"""

from pipeline.profile.detectors import (
    communication_bound,
    compute_bound,
    inconclusive,
    input_bound,
    startup_bound,
    straggler,
    transfer_bound,
)
from pipeline.profile.detectors.base import Facts, Finding
from pipeline.profile.detectors.straggler import straggler_rule

#: verdict → detector, in precedence order (earlier wins a tie).
DETECTORS = {
    m.VERDICT: m.detect
    for m in (straggler, input_bound, startup_bound, transfer_bound, communication_bound,
              compute_bound)
}

__all__ = ["DETECTORS", "Facts", "Finding", "inconclusive", "straggler_rule"]
