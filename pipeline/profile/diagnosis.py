"""Name the bottleneck from the merged breakdown and the preprocessing stats (pure).

Runs on the driver (and in ``pipeline report``); plain numbers in, a :class:`Diagnosis` out. The
numbers are *costs*: shares of the training phase (every second from the first epoch's start-up
to the last checkpoint, on every rank), defined in :mod:`pipeline.profile.merge`.

Rules, in order:

1. **Evidence first.** When the named phases explain less than
   ``profile.min_explained_fraction`` of the training phase (``other`` + ``untracked`` is the
   rest), the verdict is ``inconclusive``: it names the unexplained share and where it sits
   (phase, ranks, epochs). No bottleneck is named on evidence that does not cover the time.
2. Every detector in :data:`~pipeline.profile.detectors.DETECTORS` looks at the numbers. Share
   thresholds are strict: a share *equal* to its threshold does not fire (the config says
   "above which"); the straggler rule is in :mod:`pipeline.profile.detectors.straggler`.
3. A ``straggler`` competes only when the other ranks' wait for it (its cost) exceeds
   ``profile.straggler_min_fraction``. Its wait shows as the others' exposed all-reduce, so it
   replaces ``communication_bound`` then. When its extra time is ``data_wait`` and the job as a
   whole is input-bound, the verdict is ``input_bound``: the ranks share one preprocessing
   stream, so adding preprocessing capacity is the fix.
4. Among ``straggler``, ``input_bound``, ``startup_bound``, ``transfer_bound`` and
   ``communication_bound`` that fired, the largest cost wins; equal costs go to the earlier in
   that order.
5. Otherwise ``compute_bound`` when compute is the largest cost; if not, ``inconclusive``
   naming the largest cost (e.g. validation).

Other detectors that fired are kept: ``evidence["also"]`` lists them and their advice follows the
winner's, prefixed with "also: ". ``changes`` are the winner's only, most promising first: the
config keys and values its advice names, for ``pipeline tune``.

The ``context`` carries current settings so advice can say "from X to Y"; its keys are dotted
config names (see :data:`CONTEXT_KEYS`, built by :func:`context_from_config`) plus ``device``
and, for a user's Ray Dataset, ``data.source.kind: ray`` (no ``data.concurrency``: the advice
names the dataset's own maps).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pipeline.profile._summary import COMPUTE_PHASES, PHASES
from pipeline.profile.config import ProfileConfig
from pipeline.profile.detectors import DETECTORS, Facts, Finding, inconclusive
from pipeline.profile.detectors.base import actors_that_fit

VERDICTS: tuple[str, ...] = (*DETECTORS, inconclusive.VERDICT)
_SHARE_VERDICTS = ("straggler", "input_bound", "startup_bound", "transfer_bound",
                   "communication_bound")

#: Context keys the advice reads: ``(section, field)`` of the job config, by dotted name.
CONTEXT_KEYS: dict[str, tuple[str, str]] = {
    "data.concurrency": ("data", "concurrency"),
    "transfer.host_prefetch": ("transfer", "host_prefetch"),
    "data.cpus_per_actor": ("data", "cpus_per_actor"),
    "data.cache": ("data", "cache"),
    "train.num_workers": ("train", "num_workers"),
    "train.batch_size": ("train", "batch_size"),
    "train.epochs": ("train", "epochs"),
    "transfer.gpu_prefetch": ("transfer", "gpu_prefetch"),
    "transfer.pin_memory": ("transfer", "pin_memory"),
    "transfer.ship_uint8": ("transfer", "ship_uint8"),
    "collective.comm_hook": ("collective", "comm_hook"),
    "collective.bucket_cap_mb": ("collective", "bucket_cap_mb"),
}


@dataclass(frozen=True)
class Diagnosis:
    """The verdict, the numbers behind it, what to change (for people), and the same as config
    changes (for ``pipeline tune``)."""

    verdict: str
    evidence: dict[str, Any] = field(default_factory=dict)
    advice: tuple[str, ...] = ()
    changes: tuple[dict[str, Any], ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The ``summary.json`` form: ``{"verdict", "evidence", "advice": [...],
        "changes": [{"key", "value", "why"}, ...]}``."""
        return {"verdict": self.verdict, "evidence": dict(self.evidence),
                "advice": list(self.advice), "changes": [dict(c) for c in self.changes]}


def context_from_config(config: Any, *, device: str = "cpu") -> dict[str, Any]:
    """The advice context from a job :class:`~pipeline.config.Config` (lists for tuples)."""
    out: dict[str, Any] = {"device": device}
    for key, (section, name) in CONTEXT_KEYS.items():
        value = getattr(getattr(config, section, None), name, None)
        if value is not None:
            out[key] = list(value) if isinstance(value, tuple) else value
    kind = getattr(getattr(getattr(config, "data", None), "source", None), "kind", None)
    if kind == "ray":  # the user's dataset runs its own maps: Feedline's pool does not exist
        out["data.source.kind"] = kind
        out.pop("data.concurrency", None)
    return out


def data_busy(data_ops: Sequence[Mapping[str, Any]], *, wall_s: float,
              slots: int) -> tuple[float | None, str | None]:
    """Busy share of the busiest operator: busy seconds / (its wall × ``slots``), at most 1.

    Every operator is measured against the preprocessing pool's ``slots`` (the
    ``data.concurrency`` max, or the actors the plan's CPUs hold when fewer); read tasks are
    usually far below it. An operator without its own
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
    if "training" not in merged:
        raise ValueError("diagnose: the merged profile has no 'training' section; rebuild it "
                         "with pipeline.profile.merge_ranks from the ranks' summaries")
    training = merged["training"]
    fractions = {p: float(merged["phases"][p]["fraction"]) for p in PHASES}
    conc = context.get("data.concurrency")
    slots = conc[-1] if isinstance(conc, (list, tuple)) else (conc or 1)
    fits = actors_that_fit(context)
    if fits is not None:  # the actors that can exist: a max the CPUs cannot hold has no idle slots
        slots = min(slots, fits)
    busy, operator = data_busy(data_ops, wall_s=float(training.get("wall_s", 0.0)),
                               slots=int(slots))
    facts = Facts(costs=training["costs"], fractions=fractions, training=training,
                  per_rank=merged["per_rank"], data_busy=busy, data_operator=operator,
                  config=config, context=dict(context))
    found: dict[str, Finding] = {}
    for verdict, detect in DETECTORS.items():
        finding = detect(facts)
        if finding is not None:
            found[verdict] = finding
    winner = (inconclusive.unexplained(facts) or _pick(found, config)
              or inconclusive.no_dominant(facts))
    also = [v for v in found if v not in (winner.verdict, "compute_bound")]
    evidence = _base_evidence(merged, fractions, busy, operator)
    evidence.update(winner.evidence)
    if also:
        evidence["also"] = also
    advice = list(winner.advice)
    for v in also:
        advice.extend(f"also: {line}" for line in found[v].advice)
    return Diagnosis(verdict=winner.verdict, evidence=evidence, advice=tuple(advice),
                     changes=winner.changes)


def _pick(found: Mapping[str, Finding], config: ProfileConfig) -> Finding | None:
    candidates = dict(found)
    straggler = candidates.pop("straggler", None)
    if straggler is not None and straggler.share > config.straggler_min_fraction:
        if straggler.evidence["cause_phase"] == "data_wait" and "input_bound" in found:
            return found["input_bound"]
        candidates.pop("communication_bound", None)  # the others' wait for it
        candidates["straggler"] = straggler
    shares = [candidates[v] for v in _SHARE_VERDICTS if v in candidates]
    if shares:
        # max() keeps the first of equal shares, i.e. the earlier verdict in _SHARE_VERDICTS.
        return max(shares, key=lambda f: f.share)
    return found.get("compute_bound")


def _base_evidence(merged: Mapping[str, Any], fractions: Mapping[str, float],
                   busy: float | None, operator: str | None) -> dict[str, Any]:
    training = merged["training"]
    return {
        "ranks": len(merged["per_rank"]),
        "steps": merged["steps"],
        "samples_per_s": merged.get("samples_per_s", 0.0),
        "step_p50_s": merged["step_s"]["p50"],
        "step_p99_s": merged["step_s"]["p99"],
        "training_wall_s": training["wall_s"],
        "explained_fraction": training["explained"],
        "costs": dict(training["costs"]),
        "time_shares": {p: v["share"] for p, v in training["phases"].items()},
        "fractions": dict(fractions),
        "data_wait_fraction": fractions["data_wait"],
        "h2d_fraction": fractions["h2d"],
        "comm_exposed_fraction": fractions["comm_exposed"],
        "compute_fraction": sum(fractions[p] for p in COMPUTE_PHASES),
        "data_busy_fraction": busy,
        "data_busiest_operator": operator,
    }
