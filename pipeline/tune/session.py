"""One tuning session on the driver: probe, diagnose, apply the named changes, re-measure.

    baseline probe ──► diagnosis names changes ──► trial probe ──► judge (decide.py)
          ▲                                                        │ keep: next trial
          └────────────────────── revert / stop ◄──────────────────┘

Ray is started (or joined) once and every probe runs inside it through :func:`pipeline.run`, so
probes pay Ray's start-up once. A probe is the user's job shortened to a few epochs (at least
two, so per-epoch start-up costs show) with the end-of-run link probe off; its throughput is
samples ÷ the job's wall time (the user's wait, :func:`~pipeline.tune.decide.user_wait_rate`).
The decisions are pure and live in :mod:`pipeline.tune.decide`; this module only runs probes
and writes ``tuned.yaml`` and ``tune.json``.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pipeline.config import Config, ConfigError, load_config, read_yaml, to_dict
from pipeline.tune.decide import (
    Budget,
    Change,
    Outcome,
    Probe,
    Trial,
    judge,
    merged,
    next_changes,
    parse_changes,
    stop_reason,
    training_rate,
    user_wait_rate,
)

logger = logging.getLogger(__name__)

#: Probes train this many epochs at most (and at least two).
PROBE_EPOCHS = 3


def probe_epochs(config: Config) -> int:
    return max(2, min(config.train.epochs, PROBE_EPOCHS))


def config_value(config: Config, key: str) -> Any:
    """The value of dotted ``key`` in ``config`` as plain data (lists for tuples); None when the
    key does not exist."""
    node: Any = to_dict(config)
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _source_data(source: str | Path | dict | Config) -> dict[str, Any]:
    if isinstance(source, Config):
        return to_dict(source)
    if isinstance(source, dict):
        return source
    return read_yaml(source)


def tuned_data(source: str | Path | dict | Config, sets: list[str],
               kept: tuple[Change, ...]) -> dict[str, Any]:
    """The user's config (file plus ``--set``s) with the kept changes applied, as plain data."""
    from pipeline.config.loader import apply_overrides

    data = apply_overrides(_source_data(source), [*sets, *(c.as_set() for c in kept)])
    load_config(data)  # a tuned config must load; ConfigError otherwise
    return data


class Tuner:
    """Runs on the driver. ``Tuner(config, sets=..., budget=..., output=...).run()``."""

    def __init__(self, config: str | Path | dict | Config, *,
                 sets: list[str] | tuple[str, ...] = (), budget: Budget, output: Path,
                 console: Console | None = None, show_progress: bool = True,
                 clock: Callable[[], float] = time.perf_counter):
        errors = budget.check()
        if errors:
            raise ConfigError(errors)
        self.source = config
        self.sets = list(sets)
        self.config = load_config(config, self.sets)
        self.budget = budget
        self.output = Path(output)
        if (self.output / "tune.json").exists():
            raise ConfigError([f"--output ({str(self.output)!r}) already holds a tune session; "
                               f"choose another directory"])
        self.console = console or Console(stderr=True, soft_wrap=True)
        self.show_progress = show_progress
        self.clock = clock
        self.probe_sets = [f"train.epochs={probe_epochs(self.config)}", "collective.probe=false"]

    # -- probes ----------------------------------------------------------------------------

    def probe(self, name: str, changes: tuple[Change, ...]) -> tuple[Probe, Config]:
        """Run the job with ``changes`` applied, shortened to a probe, into OUTPUT/name."""
        from pipeline.api import run

        out = self.output / name
        out.mkdir(parents=True, exist_ok=True)
        started = self.clock()
        with (out / "console.log").open("w") as log:
            result = run(self.source, console=Console(file=log, soft_wrap=True, width=120),
                         show_progress=False,
                         sets=[*self.sets, *(c.as_set() for c in changes), *self.probe_sets,
                               f"run.output={out}"])
        summary = result.summary
        diagnosis = summary.get("diagnosis") or {}
        current = {k: config_value(result.config, k)
                   for k in (*_keys(diagnosis), *_FALLBACK_KEYS)}
        advised, origin = parse_changes(diagnosis, current)
        steady = summary.get("steady_samples_per_second")
        return Probe(samples_per_s=user_wait_rate(summary),
                     training_samples_per_s=training_rate(summary),
                     verdict=str(diagnosis.get("verdict", "unknown")), changes=advised,
                     seconds=self.clock() - started, changes_from=origin,
                     steady_samples_per_s=float(steady) if steady is not None else None,
                     run_dir=str(out)), result.config

    # -- the session -----------------------------------------------------------------------

    def run(self) -> Outcome:
        from pipeline.cluster.session import ray_session

        started = self.clock()
        self.output.mkdir(parents=True, exist_ok=True)
        progress = Progress(TextColumn("[bold]tune[/] {task.description}"), BarColumn(),
                            TextColumn("probe {task.completed:.0f}/{task.total:.0f}"),
                            TimeElapsedColumn(), TextColumn("budget {task.fields[budget]}"),
                            console=self.console, disable=not self.show_progress,
                            transient=True)
        task = progress.add_task("baseline", total=self.budget.max_trials + 1,
                                 budget=f"{self.budget.budget_s:.0f}s")
        kept: tuple[Change, ...] = ()
        rejected: list[Change] = []
        trials: list[Trial] = []
        with ray_session(self.config.run.address, self.config.run.num_cpus,
                         connect_timeout_s=self.config.run.connect_timeout_s), progress:
            current, config = self.probe("probe-0-baseline", kept)
            baseline = current
            progress.advance(task)
            self.console.print(f"baseline: {current.samples_per_s:,.1f} samples/s, "
                               f"{current.verdict} ({current.seconds:.0f}s)")
            durations = [current.seconds]
            advice = current.changes  # what the next trial picks from
            while True:
                values = {c.key: config_value(config, c.key) for c in advice}
                pending = next_changes(advice, values, rejected)
                stopped = stop_reason(trials=len(trials), budget=self.budget,
                                      elapsed_s=self.clock() - started, probe_s=durations,
                                      pending=pending, verdict=current.verdict)
                if stopped:
                    break
                number = len(trials) + 1
                label = ", ".join(c.label() for c in pending)
                progress.update(task, description=f"trial {number}: {label}")
                try:
                    after, after_config = self.probe(f"trial-{number}", merged(kept, pending))
                except Exception as exc:  # recorded in tune.json and the table, then reverted
                    first = (str(exc).splitlines() or [""])[0]
                    reason = f"probe failed ({type(exc).__name__}: {first}): reverted"
                    logger.warning("tune trial %d (%s): %s", number, label, reason)
                    trials.append(Trial(number=number, changes=pending, before=current,
                                        after=None, kept=False, reason=reason))
                    self.console.print(f"trial {number}: {label}: {reason}")
                    rejected.extend(pending)
                    continue
                durations.append(after.seconds)
                progress.advance(task)
                verdict = judge(current, after, noise=self.budget.noise)
                trials.append(Trial(number=number, changes=pending, before=current, after=after,
                                    kept=verdict.keep, reason=verdict.reason))
                self.console.print(f"trial {number}: {label}: {verdict.reason}")
                if verdict.keep:
                    kept = merged(kept, pending)
                    current, config, advice = after, after_config, after.changes
                else:
                    rejected.extend(pending)
                    advice = (*after.changes, *advice)  # the reverted trial's advice first
            progress.update(task, completed=progress.tasks[0].total)
        outcome = Outcome(baseline=baseline, trials=tuple(trials), stopped=stopped, kept=kept)
        self.write(outcome, elapsed_s=self.clock() - started)
        return outcome

    def write(self, outcome: Outcome, *, elapsed_s: float) -> None:
        """``tuned.yaml`` (the config with the kept changes) and ``tune.json`` (every probe)."""
        data = tuned_data(self.source, self.sets, outcome.kept)
        kept = ", ".join(c.label() for c in outcome.kept) or "none (no change helped)"
        name = self.source if isinstance(self.source, (str, Path)) else "the config"
        header = f"# pipeline tune: {name} with the changes that helped: {kept}\n"
        (self.output / "tuned.yaml").write_text(header + yaml.safe_dump(data, sort_keys=False))
        report = {
            "config": str(self.source) if isinstance(self.source, (str, Path)) else None,
            "sets": self.sets,
            "probe_sets": self.probe_sets,
            "budget": asdict(self.budget),
            "elapsed_s": elapsed_s,
            "stopped": outcome.stopped,
            "baseline": _probe_dict(outcome.baseline),
            "trials": [{"trial": t.number, "changes": [asdict(c) for c in t.changes],
                        "before": _probe_dict(t.before),
                        "after": _probe_dict(t.after) if t.after else None,
                        "ratio": t.ratio, "kept": t.kept, "reason": t.reason}
                       for t in outcome.trials],
            "kept": [asdict(c) for c in outcome.kept],
            "final": _probe_dict(outcome.final),
            "gain": outcome.gain,
        }
        (self.output / "tune.json").write_text(json.dumps(report, indent=2))


# The keys decide.fallback_changes reads when the diagnosis carries no `changes`.
_FALLBACK_KEYS = ("data.concurrency", "transfer.host_prefetch", "transfer.gpu_prefetch")


def _keys(diagnosis: dict[str, Any]) -> list[str]:
    return [str(c["key"]) for c in diagnosis.get("changes") or () if isinstance(c, dict)
            and "key" in c]


def _probe_dict(probe: Probe) -> dict[str, Any]:
    return asdict(probe)
