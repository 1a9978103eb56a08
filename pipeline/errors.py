"""The errors a user of Feedline catches, defined here and importable from here::

    from pipeline.errors import ConfigError, PlanError, BadSampleThresholdError

Each names its class of failure and the exit code ``pipeline run`` gives it (README, "Exit
codes"). Nothing here imports Ray or torch.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
import signal
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

#: the errors of a disk that takes no more: full, over quota, read-only
FULL = (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
NEARLY_FULL = 64 * 2**20  # bytes free: a disk that refuses writes


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


class OutputWriteError(OSError):
    """The run folder (its summary, metrics, ids or Ray Train's checkpoints) could not be
    written: the disk is full, over quota or read-only (exit 6). The last checkpoint written is
    kept; a rerun into the folder, once there is room, resumes from it."""

    @classmethod
    def find(cls, exc: BaseException, output: Path) -> OutputWriteError | None:
        """``exc`` as the run folder's write error, when a full disk is what it (or an error it
        came from, a Train worker's included) says; None otherwise."""
        seen: BaseException | None = exc
        while seen is not None:
            if isinstance(seen, cls):
                return seen
            if isinstance(seen, OSError) and seen.errno in FULL:
                if _here(seen.filename, output):
                    return cls.of(seen, output)
            elif "No space left on device" in str(seen) and _here(None, output):  # Ray's text
                return cls.of(OSError(errno.ENOSPC, "No space left on device"), output)
            seen = seen.__cause__ or seen.__context__
        return None

    @classmethod
    @contextlib.contextmanager
    def converted(cls, output: Path) -> Iterator[None]:
        """Raise an error of the block that a full disk caused as this class."""
        try:
            yield
        except Exception as exc:
            full = cls.find(exc, output)
            if full is None or full is exc:
                raise
            raise full from exc

    @classmethod
    def of(cls, exc: OSError, output: Path) -> OutputWriteError:
        try:
            free = f"{shutil.disk_usage(output).free / 2**20:.1f} MiB free there"
        except OSError:
            free = "its free space unknown"
        return cls(exc.errno, f"cannot write the run folder {output} ({exc.strerror}; {free}): "
                              f"free space on its disk or choose another run.output; the last "
                              f"checkpoint written is kept and a rerun into this folder resumes "
                              f"from it")

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _here(filename: Any, output: Path) -> bool:
    """Whether a full disk is the run folder's: the file that failed is in it, or, when the
    error does not say which file, the folder's disk has (next to) no room left. Another disk
    (Ray spilling objects to a full /tmp) is not the run folder's to name."""
    if filename:
        return Path(str(filename)).resolve().is_relative_to(output.resolve())
    try:
        return shutil.disk_usage(output).free < NEARLY_FULL
    except OSError:
        return False


class CollectiveTimeoutError(RuntimeError):
    """A collective waited ``collective.timeout_s`` for a peer that never joined."""


class RunStopped(KeyboardInterrupt):
    """``pipeline.run`` was stopped by a signal (Ctrl-C, SIGTERM: exit 130 / 143); ``summary``
    (also ``summary.json``) says where it stopped and how to resume."""

    def __init__(self, signum: int, output: Path, summary: Mapping[str, Any]):
        super().__init__(f"stopped by {signal.Signals(signum).name}; run directory {output}")
        self.signum = signum
        self.output = output
        self.summary = summary

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130 (SIGINT), 143 (SIGTERM)."""
        return 128 + self.signum


__all__ = ["BadSampleThresholdError", "CollectiveTimeoutError", "ConfigError",
           "NonFiniteLossError", "OutputWriteError", "PlanError", "RunStopped"]
