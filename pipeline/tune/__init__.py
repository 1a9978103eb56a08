"""``pipeline tune``: advice proven by measurement.

Short probe runs of the user's job, diagnosed; the changes the diagnosis names are applied and
re-measured, kept when they help and reverted when they do not (:mod:`pipeline.tune.decide`,
pure), until the verdict stops improving, a trial limit or a time budget. Runs on the driver.
"""

from pipeline.tune.decide import Budget, Change, Outcome, Probe, Trial, judge
from pipeline.tune.session import Tuner

__all__ = ["Budget", "Change", "Outcome", "Probe", "Trial", "Tuner", "judge"]
