"""The errors a user of Feedline catches, defined here and importable from here::

    from pipeline.errors import ConfigError, PlanError, BadSampleThresholdError

Each names its class of failure and the exit code ``pipeline run`` gives it (README, "Exit
codes"). Nothing here imports Ray or torch.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any


class ConfigError(ValueError):
    """A config field or the data it names cannot train (exit 2); ``errors`` holds one line per
    problem, each naming the field, the value and the remedy."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


class PlanError(ValueError):
    """The cluster cannot run this plan without starving a stage (exit 3); the message names the
    numbers to change."""


class BadSampleThresholdError(RuntimeError):
    """More bad samples than ``data.max_bad_fraction`` / ``data.max_consecutive_bad`` allow: the
    data, not a few files, is broken (exit 1); ``quarantine.jsonl`` says which and why."""


class NonFiniteLossError(FloatingPointError):
    """The training loss was NaN or infinite in more than ``train.max_nonfinite_steps`` steps:
    the run diverged (status ``diverged``, exit 5); the last checkpoint saved before it is
    kept."""


class CollectiveTimeoutError(RuntimeError):
    """A collective waited ``collective.timeout_s`` for a peer that never joined."""


class RunStopped(KeyboardInterrupt):
    """``pipeline.run`` was stopped by a signal (Ctrl-C, SIGTERM: exit 130 / 143); ``summary``
    (also ``summary.json``) says where it stopped and how to resume."""

    def __init__(self, signum: int, output: Path, summary: dict[str, Any]):
        super().__init__(f"stopped by {signal.Signals(signum).name}; run directory {output}")
        self.signum = signum
        self.output = output
        self.summary = summary

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130 (SIGINT), 143 (SIGTERM)."""
        return 128 + self.signum


__all__ = ["BadSampleThresholdError", "CollectiveTimeoutError", "ConfigError",
           "NonFiniteLossError", "PlanError", "RunStopped"]
