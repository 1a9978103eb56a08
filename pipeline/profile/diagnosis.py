"""Name the bottleneck from the merged breakdown and the preprocessing stats (pure).

Runs on the driver (and in ``pipeline report``); plain numbers in, a :class:`Diagnosis` out.

Rules, in order:

1. Every detector in :data:`~pipeline.profile.detectors.DETECTORS` looks at the numbers. Share
   thresholds are strict: a share *equal* to its threshold does not fire (the config says
   "above which"), and a rank exactly ``straggler_ratio`` × slower is not a straggler.
2. ``straggler`` wins when it fires: imbalance makes the fast ranks wait in the all-reduce, which
   would otherwise be misread as communication-bound. Exception: when the straggler's extra time
   is ``data_wait`` and the job as a whole is input-bound, the verdict is ``input_bound`` — the
   ranks share one preprocessing stream, so adding preprocessing capacity is the fix.
3. Otherwise, among ``input_bound``, ``transfer_bound`` and ``communication_bound``, the one whose
   share of step time is largest wins (it costs the most); equal shares go to the earlier in
   that order (input problems also starve copies and collectives downstream).
4. Nothing fired: ``compute_bound``.

Other detectors that fired are kept: ``evidence["also"]`` lists them and their advice follows the
winner's, prefixed with "also: ".

The ``context`` carries current settings so advice can say "from X to Y"; its keys are dotted
config names (see :data:`CONTEXT_KEYS`, built by :func:`context_from_config`) plus ``device``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.profile._summary import COMPUTE_PHASES, PHASES
from pipeline.profile.config import ProfileConfig
from pipeline.profile.detectors import DETECTORS, Facts, Finding

VERDICTS: tuple[str, ...] = tuple(DETECTORS)
_SHARE_VERDICTS = ("input_bound", "transfer_bound", "communication_bound")

#: Context keys the advice reads: ``(section, field)`` of the job config, by dotted name.
CONTEXT_KEYS: dict[str, tuple[str, str]] = {
    "data.concurrency": ("data", "concurrency"),
    "data.prefetch_batches": ("data", "prefetch_batches"),
    "data.cpus_per_actor": ("data", "cpus_per_actor"),
    "train.num_workers": ("train", "num_workers"),
    "train.batch_size": ("train", "batch_size"),
    "transfer.gpu_prefetch": ("transfer", "gpu_prefetch"),
    "transfer.pin_memory": ("transfer", "pin_memory"),
    "transfer.ship_uint8": ("transfer", "ship_uint8"),
    "collective.comm_hook": ("collective", "comm_hook"),
    "collective.bucket_cap_mb": ("collective", "bucket_cap_mb"),
}


@dataclass(frozen=True)
class Diagnosis:
    """The verdict, the numbers behind it, and what to change."""

    verdict: str
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The ``summary.json`` form: ``{"verdict", "evidence", "advice": [...]}``."""
        return {"verdict": self.verdict, "evidence": dict(self.evidence),
                "advice": list(self.advice)}


def context_from_config(config: Any, *, device: str = "cpu") -> dict[str, Any]:
    """The advice context from a job :class:`~pipeline.config.Config` (lists for tuples)."""
    out: dict[str, Any] = {"device": device}
    for key, (section, name) in CONTEXT_KEYS.items():
        value = getattr(getattr(config, section, None), name, None)
        if value is not None:
            out[key] = list(value) if isinstance(value, tuple) else value
    return out


def data_busy(data_ops: Sequence[Mapping[str, Any]], *, wall_s: float,
              slots: int) -> tuple[float | None, str | None]:
    """Busy share of the busiest operator: busy seconds / (its wall × ``slots``), at most 1.

    Every operator is measured against the preprocessing pool's ``slots`` (the
    ``data.concurrency`` max); read tasks are usually far below it. An operator without its own
    ``wall_s`` is measured over ``wall_s`` (the training wall).
    """
    best: tuple[float | None, str | None] = (None, None)
    for op in data_ops:
        wall = op.get("wall_s") or wall_s
        if not wall or op.get("busy_s") is None:
            continue
        share = min(1.0, op["busy_s"] / (wall * max(1, slots)))
        if best[0] is None or share > best[0]:
            best = (share, str(op.get("operator")))
    return best


def diagnose(merged: Mapping[str, Any], data_ops: Sequence[Mapping[str, Any]],
             config: ProfileConfig, context: Mapping[str, Any]) -> Diagnosis:
    """Classify the run (see the module docstring for the rules)."""
    if not merged.get("steps"):
        raise ValueError("diagnose: the merged profile has no steps; check that "
                         "profile.enabled is true and that the run made at least one step")
    fractions = {p: float(merged["phases"][p]["fraction"]) for p in PHASES}
    conc = context.get("data.concurrency")
    slots = conc[-1] if isinstance(conc, (list, tuple)) else (conc or 1)
    busy, operator = data_busy(data_ops, wall_s=float(merged.get("wall_s", 0.0)),
                               slots=int(slots))
    facts = Facts(fractions=fractions, per_rank=merged["per_rank"], data_busy=busy,
                  data_operator=operator, config=config, context=dict(context))
    found: dict[str, Finding] = {}
    for verdict, detect in DETECTORS.items():
        finding = detect(facts)
        if finding is not None:
            found[verdict] = finding
    winner = _pick(found)
    also = [v for v in found if v not in (winner.verdict, "compute_bound")]
    evidence = _base_evidence(merged, fractions, busy, operator)
    evidence.update(winner.evidence)
    if also:
        evidence["also"] = also
    advice = list(winner.advice)
    for v in also:
        advice.extend(f"also: {line}" for line in found[v].advice)
    return Diagnosis(verdict=winner.verdict, evidence=evidence, advice=tuple(advice))


def _pick(found: Mapping[str, Finding]) -> Finding:
    straggler = found.get("straggler")
    if straggler is not None:
        if straggler.evidence["cause_phase"] == "data_wait" and "input_bound" in found:
            return found["input_bound"]
        return straggler
    shares = [found[v] for v in _SHARE_VERDICTS if v in found]
    if shares:
        # max() keeps the first of equal shares, i.e. the earlier verdict in _SHARE_VERDICTS.
        return max(shares, key=lambda f: f.share)
    return found["compute_bound"]


def _base_evidence(merged: Mapping[str, Any], fractions: Mapping[str, float],
                   busy: float | None, operator: str | None) -> dict[str, Any]:
    return {
        "ranks": len(merged["per_rank"]),
        "steps": merged["steps"],
        "samples_per_s": merged.get("samples_per_s", 0.0),
        "step_p50_s": merged["step_s"]["p50"],
        "step_p99_s": merged["step_s"]["p99"],
        "fractions": dict(fractions),
        "data_wait_fraction": fractions["data_wait"],
        "h2d_fraction": fractions["h2d"],
        "comm_exposed_fraction": fractions["comm_exposed"],
        "compute_fraction": sum(fractions[p] for p in COMPUTE_PHASES),
        "data_busy_fraction": busy,
        "data_busiest_operator": operator,
    }
