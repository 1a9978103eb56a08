"""The errors a user of Feedline catches, importable from one place::

    from pipeline.errors import ConfigError, PlanError, BadSampleThresholdError

- :class:`ConfigError`: a config field or the data it names cannot train (exit 2); the message
  names the field, the value and the remedy.
- :class:`PlanError`: the resources cannot run the plan without starving a stage (exit 3).
- :class:`BadSampleThresholdError`: more bad samples than ``data.max_bad_fraction`` /
  ``data.max_consecutive_bad`` allow (exit 1); ``quarantine.jsonl`` says which and why.
- :class:`NonFiniteLossError`: the training loss was NaN or infinite in more than
  ``train.max_nonfinite_steps`` steps: the run diverged (status ``diverged``, exit 5); the last
  checkpoint saved before it is kept.
- :class:`RunStopped`: Ctrl-C or SIGTERM stopped the run (resumable; exit 130 / 143).
- :class:`CollectiveTimeoutError`: a collective did not finish in ``collective.timeout_s``.

Each loads on first use, so importing this module pulls in neither Ray nor torch.
"""

from importlib import import_module
from typing import Any

_WHERE = {"ConfigError": "pipeline.config.loader", "PlanError": "pipeline.cluster.planner",
          "BadSampleThresholdError": "pipeline.data.reader", "RunStopped": "pipeline.cluster.stop",
          "NonFiniteLossError": "pipeline.train.step",
          "CollectiveTimeoutError": "pipeline.collective.process_group"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'pipeline.errors' has no attribute {name!r}")
