"""What ``pipeline tune`` does next: try a change, keep it, revert it, or stop (pure).

Runs on the driver; plain numbers in, frozen dataclasses out, tested without Ray.

One trial applies one change: the first the last probe's diagnosis names that is neither the
current value nor reverted before (:func:`next_changes`; the winning verdict's advice comes
first, and one change per trial keeps each kept change proven on its own). It re-measures and
is judged against the probe before it (``after / before`` throughput, ``NOISE`` either side):

====================================  ======  ==========================================
after / before                        change  then
====================================  ======  ==========================================
< 1 − NOISE (worse)                   revert  try the next advice
> 1 + NOISE (better)                  keep    diagnose again, try what it names next
within noise, verdict moved on        keep    (the bottleneck it attacked is gone)
within noise, same verdict            revert  try the next advice
====================================  ======  ==========================================

After a revert the next advice comes from the reverted trial's diagnosis first (it saw the job
with the change), then from what was named before it and not tried yet. Tuning stops only
when no untried advice is left, at ``--max-trials``, or when the time budget cannot hold another
probe (:func:`stop_reason`).

The judged throughput is the training phase's (:attr:`Probe.judged`: samples ÷ the epochs'
wall time — every epoch's start-up, steps, validation and checkpoints), where every change the
diagnosis names acts. The job's fixed costs around it (Ray's start, the worker group, teardown)
vary by seconds between identical runs on a busy machine (12.8 vs 16.9 s of worker-group start
in two probes here) and would drown a real gain; the user's whole-job rate is kept beside it.

"Moved on" means a different verdict that is not ``inconclusive``. A neutral change is
reverted so that ``tuned.yaml`` holds only changes that measurably helped. Before each trial
:func:`stop_reason` checks the trial count, the time budget (a probe is not started when one
as long as the longest so far would end past it) and whether any untried change is left.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

#: Relative throughput change within which two probes count as equal.
NOISE = 0.03
#: The verdict that says the diagnosis does not know; moving to it is not progress.
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, kw_only=True)
class Change:
    """One config change: a dotted key and the new value, valid for ``--set key=value``."""

    key: str
    value: Any
    why: str = ""
    together: str = ""  # changes that share it are tried in one trial (each alone does nothing)

    def as_set(self) -> str:
        """``data.concurrency=[1, 4]``: the ``--set`` form (JSON is valid YAML)."""
        return f"{self.key}={json.dumps(self.value)}"

    def label(self) -> str:
        """``data.cache=memory``, ``data.concurrency=[1, 4]``: for tables and messages."""
        shown = self.value if isinstance(self.value, str) else json.dumps(self.value)
        return f"{self.key}={shown}"


@dataclass(frozen=True, kw_only=True)
class Probe:
    """One short run's outcome: throughput, verdict and the changes its diagnosis names."""

    samples_per_s: float
    """Samples ÷ the job's wall seconds: what the user waits for (:func:`user_wait_rate`)."""
    training_samples_per_s: float | None = None
    """Samples ÷ the training phase's wall seconds (:func:`training_rate`), when known."""
    verdict: str
    changes: tuple[Change, ...] = ()
    seconds: float = 0.0
    changes_from: str = "diagnosis"  # or "fallback" when the diagnosis had no `changes`
    steady_samples_per_s: float | None = None  # beside the headline, when the summary has it
    run_dir: str = ""

    @property
    def judged(self) -> float:
        """The rate trials are judged on: the training phase's, else the job's."""
        return self.training_samples_per_s or self.samples_per_s


@dataclass(frozen=True, kw_only=True)
class Judgement:
    """Whether a trial's changes stay, and why, in one line."""

    keep: bool
    reason: str


@dataclass(frozen=True, kw_only=True)
class Trial:
    """A tried set of changes with the probes before and after it."""

    number: int
    changes: tuple[Change, ...]
    before: Probe
    after: Probe | None  # None when the probe failed
    kept: bool
    reason: str

    @property
    def ratio(self) -> float | None:
        if self.after is None or self.before.judged <= 0:
            return None
        return self.after.judged / self.before.judged


@dataclass(frozen=True, kw_only=True)
class Budget:
    """Limits of one tuning session."""

    max_trials: int
    budget_s: float
    noise: float = NOISE

    def check(self) -> list[str]:
        errors = []
        if self.max_trials < 1:
            errors.append(f"--max-trials ({self.max_trials}) must be >= 1")
        if not self.budget_s > 0:
            errors.append(f"--budget-s ({self.budget_s}) must be > 0")
        if not 0 <= self.noise < 1:
            errors.append(f"noise ({self.noise}) must be in [0, 1)")
        return errors


def user_wait_rate(summary: Mapping[str, Any]) -> float:
    """Samples per second of the job's wall time from a ``summary.json``.

    Summaries that also carry ``steady_samples_per_second`` define ``samples_per_second`` as
    samples ÷ job wall time; older ones define it over the epochs only, so the rate is computed
    from ``samples`` and ``wall_seconds`` instead.
    """
    if "steady_samples_per_second" in summary:
        return float(summary.get("samples_per_second") or 0.0)
    samples, wall = summary.get("samples"), summary.get("wall_seconds")
    if samples and wall:
        return float(samples) / float(wall)
    return float(summary.get("samples_per_second") or 0.0)


def training_rate(summary: Mapping[str, Any]) -> float | None:
    """Samples per second of the training phase: ``samples`` ÷ the ``breakdown`` rows of the
    epochs (``epoch N ...``); None for a summary without them."""
    seconds = sum(float(r["seconds"]) for r in summary.get("breakdown") or ()
                  if str(r.get("phase", "")).startswith("epoch "))
    samples = summary.get("samples")
    return float(samples) / seconds if samples and seconds > 0 else None


def judge(before: Probe, after: Probe, *, noise: float = NOISE) -> Judgement:
    """Keep or revert a trial and say whether to go on (the table in the module docstring)."""
    if before.judged <= 0:
        raise ValueError(f"judge: the probe before the trial measured {before.judged} "
                         f"samples/s; a probe must train at least one sample")
    ratio = after.judged / before.judged
    moved = f"{before.verdict} → {after.verdict}"
    if ratio < 1 - noise:
        return Judgement(keep=False, reason=f"throughput fell to {ratio:.2f}x (below "
                                            f"{1 - noise:.2f}x): reverted")
    if ratio > 1 + noise:
        return Judgement(keep=True, reason=f"throughput {ratio:.2f}x ({moved})")
    if after.verdict != before.verdict and after.verdict != INCONCLUSIVE:
        return Judgement(keep=True,
                         reason=f"throughput within noise ({ratio:.2f}x) but the verdict moved "
                                f"on ({moved})")
    return Judgement(keep=False,
                     reason=f"throughput within noise ({ratio:.2f}x) and the verdict is still "
                            f"{after.verdict}: reverted")


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, (list, tuple)) else value


def _same(a: Any, b: Any) -> bool:
    return _plain(a) == _plain(b)


def untried(changes: Iterable[Change], current: Mapping[str, Any],
            rejected: Iterable[Change] = ()) -> tuple[Change, ...]:
    """The changes worth a trial: not already the current value, not reverted before, one per
    key (the first named wins)."""
    out: list[Change] = []
    for change in changes:
        if change.key in current and _same(current[change.key], change.value):
            continue
        if any(r.key == change.key and _same(r.value, change.value) for r in rejected):
            continue
        if any(c.key == change.key for c in out):
            continue
        out.append(change)
    return tuple(out)


def next_changes(changes: Iterable[Change], current: Mapping[str, Any],
                 rejected: Iterable[Change] = ()) -> tuple[Change, ...]:
    """What the next trial applies: the first of :func:`untried`, with the untried changes that
    go together with it (empty when none is left)."""
    left = untried(changes, current, rejected)
    if not left or not left[0].together:
        return left[:1]
    return tuple(c for c in left if c.together == left[0].together)


def merged(kept: Sequence[Change], new: Sequence[Change]) -> tuple[Change, ...]:
    """``kept`` with ``new`` applied on top: a new value for a kept key replaces it."""
    keys = {c.key for c in new}
    return (*(c for c in kept if c.key not in keys), *new)


def stop_reason(*, trials: int, budget: Budget, elapsed_s: float,
                probe_s: Sequence[float], pending: Sequence[Change], verdict: str) -> str | None:
    """Why tuning stops before the next trial, or None to run it."""
    if not pending:
        return f"no advice is left that was not tried already (the verdict: {verdict})"
    if trials >= budget.max_trials:
        return f"reached --max-trials {budget.max_trials}"
    longest = max(probe_s, default=0.0)
    if elapsed_s + longest > budget.budget_s:
        return (f"a probe takes up to {longest:.0f}s and {elapsed_s:.0f}s of --budget-s "
                f"{budget.budget_s:.0f} are used")
    return None


# -- when the diagnosis carries no machine-readable `changes` ------------------------------------


def fallback_changes(verdict: str, evidence: Mapping[str, Any],
                     current: Mapping[str, Any]) -> tuple[Change, ...]:
    """Changes for a diagnosis without ``changes``, from its verdict, its evidence numbers and
    the current config (never from the advice strings). Covers the input- and transfer-bound
    verdicts only; anything else yields no change."""
    if verdict == "input_bound":
        if evidence.get("data_saturated") is False:
            prefetch = current.get("transfer.host_prefetch")
            if isinstance(prefetch, int):
                return (Change(key="transfer.host_prefetch", value=max(2 * prefetch, 2),
                               why="trainers wait while preprocessing idles"),)
            return ()
        low, high = current.get("data.concurrency") or (None, None)
        if not isinstance(high, int):
            return ()
        wait = float(evidence.get("data_wait_fraction") or 0.0)
        # Preprocessing delivers 1 − wait of the needed rate: scale the pool by 1/(1 − wait).
        factor = min(4.0, 1.0 / max(1e-9, 1.0 - wait))
        target = max(high + 1, math.ceil(high * factor))
        return (Change(key="data.concurrency", value=[low, target],
                       why=f"trainers waited {wait:.0%} of each step for input"),)
    if verdict == "transfer_bound":
        depth = current.get("transfer.gpu_prefetch")
        if isinstance(depth, int):
            return (Change(key="transfer.gpu_prefetch", value=2 * depth,
                           why="host→device copies are exposed"),)
    return ()


def parse_changes(diagnosis: Mapping[str, Any],
                  current: Mapping[str, Any]) -> tuple[tuple[Change, ...], str]:
    """The diagnosis's ``changes`` (and ``"diagnosis"``), or, when it has none,
    :func:`fallback_changes` (and ``"fallback"``)."""
    raw = diagnosis.get("changes")
    if raw is None:
        return (fallback_changes(str(diagnosis.get("verdict")), diagnosis.get("evidence") or {},
                                 current), "fallback")
    changes = []
    for item in raw:
        if not isinstance(item, Mapping) or "key" not in item or "value" not in item:
            raise ValueError(f"diagnosis.changes: expected {{'key', 'value', 'why'}}, got "
                             f"{item!r}")
        changes.append(Change(key=str(item["key"]), value=item["value"],
                              why=str(item.get("why", "")),
                              together=str(item.get("together", ""))))
    return tuple(changes), "diagnosis"


@dataclass(frozen=True, kw_only=True)
class Outcome:
    """A finished session: the first probe, the trials, the kept changes and why it stopped."""

    baseline: Probe
    trials: tuple[Trial, ...] = ()
    stopped: str = ""
    kept: tuple[Change, ...] = field(default_factory=tuple)

    @property
    def final(self) -> Probe:
        """The last probe whose changes are all kept (the tuned config's measurement)."""
        best = self.baseline
        for trial in self.trials:
            if trial.kept and trial.after is not None:
                best = trial.after
        return best

    @property
    def gain(self) -> float:
        if self.baseline.samples_per_s <= 0:
            return 0.0
        return self.final.samples_per_s / self.baseline.samples_per_s
