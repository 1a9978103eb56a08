"""The ingest benchmark's physical check: a result the machine cannot have produced is INVALID.

Pure functions over plain numbers (driver; no Ray, no clock), so every rule is unit-tested
with figures that must fail. A contender's result is rejected, with every reason, when:

1. **It needs more cores than exist.** ``samples/s x CPU s/sample`` is the number of cores the
   run kept busy on average; it must be ``<= cores x CORE_SLACK`` in every run. A pass that
   excludes start-up, or CPU that was not measured, shows up here.
2. **It beats the ceiling** (the decode alone on every core) by more than noise: the median
   may exceed the ceiling's median by at most ``max(CEILING_NOISE, ceiling's (max-min)/median)``.
3. **Its CPU per sample is below the decode's own** (``CPU_FLOOR`` x the ceiling's): some of
   its processes were not measured (Ray workers outside this process tree), so rule 1 proved
   nothing.
4. **Its CPU could not be seen** at all (``cpu_visible`` false: Ray joined, not started here).

Rules 2 and 3 hold only where the contender does the ceiling's work: a decoded-sample cache
legitimately skips decoding in later epochs, so its multi-epoch figures are exempt
(``same_work=False``) and say so.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

CORE_SLACK = 1.05
CEILING_NOISE = 0.10
CPU_FLOOR = 0.75


@dataclass(frozen=True)
class RunFigures:
    """One timed run: its whole-pass throughput and the CPU its process tree spent per sample."""

    rep: int
    samples_per_s: float
    cpu_s_per_sample: float


@dataclass(frozen=True)
class Verdict:
    """``valid`` with no reasons, or INVALID with every rule it broke."""

    reasons: tuple[str, ...]

    @property
    def valid(self) -> bool:
        return not self.reasons


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _spread(values: Sequence[float]) -> float:
    """``(max - min) / median``, the run-to-run noise of a set of figures."""
    middle = _median(values)
    return (max(values) - min(values)) / middle if middle > 0 else 0.0


def check_runs(runs: Sequence[RunFigures], *, label: str, cores: float,
               ceiling: Sequence[RunFigures] = (), same_work: bool = True,
               cpu_visible: bool = True) -> Verdict:
    """Apply the rules to one contender's runs of one kind (e.g. its 3-epoch runs).

    ``ceiling`` holds the ceiling's runs of the same kind (empty: rules 2 and 3 are skipped,
    as for the ceiling itself). ``label`` names the kind in the reasons ("3 epochs").
    """
    if not runs:
        raise ValueError(f"{label}: no runs to check")
    if not cores > 0:
        raise ValueError(f"cores ({cores!r}) must be > 0")
    reasons = []
    if not cpu_visible:
        reasons.append(f"{label}: CPU of its Ray workers not measured (Ray was not started "
                       f"by this process); run with no RAY_ADDRESS so the benchmark starts one")
    limit = cores * CORE_SLACK
    over = [(run.samples_per_s * run.cpu_s_per_sample, run) for run in runs
            if run.samples_per_s * run.cpu_s_per_sample > limit]
    if over:
        used, worst = max(over, key=lambda pair: pair[0])
        reps = ", ".join(str(run.rep) for _, run in over)
        reasons.append(
            f"{label}: {len(over)} of {len(runs)} runs (rep {reps}) need more cores than the "
            f"machine has; worst {worst.samples_per_s:,.0f} samples/s x "
            f"{worst.cpu_s_per_sample * 1e3:.2f} CPU ms/sample = {used:.2f} cores "
            f"(limit {limit:.2f} on {cores:g})")
    if ceiling and same_work:
        ours = _median([r.samples_per_s for r in runs])
        top = [r.samples_per_s for r in ceiling]
        noise = max(CEILING_NOISE, _spread(top))
        if ours > _median(top) * (1 + noise):
            reasons.append(
                f"{label}: median {ours:,.0f} samples/s beats the ceiling's "
                f"{_median(top):,.0f} by {ours / _median(top) - 1:.0%}, more than its noise "
                f"({noise:.0%}); the ceiling does the same decode on every core")
        cpu = _median([r.cpu_s_per_sample for r in runs])
        floor = CPU_FLOOR * _median([r.cpu_s_per_sample for r in ceiling])
        if cpu < floor:
            reasons.append(
                f"{label}: {cpu * 1e3:.2f} CPU ms/sample is below the decode's own "
                f"({floor * 1e3:.2f} = {CPU_FLOOR:g} x the ceiling's); some of its processes "
                f"were not measured")
    return Verdict(tuple(reasons))


def check_contender(runs: Mapping[int, Sequence[RunFigures]], *, cores: float,
                    ceiling: Mapping[int, Sequence[RunFigures]] | None = None,
                    same_work_epochs: Sequence[int] | None = None,
                    cpu_visible: bool = True) -> Verdict:
    """All rules over every kind of run (``epochs -> runs``); one verdict for the contender.

    ``same_work_epochs``: the epoch counts where the contender does the ceiling's work
    (None: all of them).
    """
    reasons: list[str] = []
    for epochs, mine in sorted(runs.items()):
        same = same_work_epochs is None or epochs in same_work_epochs
        label = f"{epochs} epoch{'s' if epochs > 1 else ''}"
        verdict = check_runs(mine, label=label, cores=cores,
                             ceiling=(ceiling or {}).get(epochs, ()), same_work=same,
                             cpu_visible=cpu_visible)
        reasons.extend(r for r in verdict.reasons if r not in reasons)
    return Verdict(tuple(reasons))
