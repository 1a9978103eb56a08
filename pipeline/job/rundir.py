"""The run directory: who holds it, what an earlier run left in it, and its ``summary.json``.

One module owns the folder's life (driver side):

- :meth:`RunDir.claim` makes the folder, refuses one that holds somebody else's files, a
  damaged run or a live run, and takes an exclusive lock (``.feedline.lock``, ``flock``) held
  for the run's life: two runs started at the same moment on one ``--output`` cannot
  both proceed, and a killed run's lock goes with its process, so a rerun resumes it;
- :meth:`RunDir.write_summary` is the one writer of ``summary.json``: strict JSON (a NaN loss
  becomes ``null``), replaced atomically, so a crash never leaves half a summary.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pipeline import jsonio
from pipeline.config import ConfigError
from pipeline.errors import FULL
from pipeline.job.summary import RunSummary

SUMMARY = "summary.json"
CONFIG = "config.yaml"
LOCK = ".feedline.lock"
#: what a folder may hold before a run's summary exists: the lock, and the console log that
#: ``pipeline tune`` opens for the run it starts there
BEFORE_SUMMARY = frozenset({LOCK, "console.log"})
#: the traces a run's summary speaks for: without a readable summary they are a damaged run's
TRACES = ("checkpoint", "delivered", "delivered.npz", "metrics.jsonl", "ray", "profile.json")


class RunDir:
    """The folder of one run (driver; not picklable while it holds the lock)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock: int | None = None

    @property
    def summary_path(self) -> Path:
        return self.path / SUMMARY

    @contextlib.contextmanager
    def claim(self) -> Iterator[str | None]:
        """Hold the folder for this run (``with rundir.claim() as found:``), or raise
        :class:`ConfigError` with the remedy. ``found`` is a line on the earlier run this one
        resumes (None for a fresh folder)."""
        found = self._take()
        try:
            yield found
        finally:
            self.release()

    def _take(self) -> str | None:
        where = f"run.output ({str(self.path)!r})"
        self.path.mkdir(parents=True, exist_ok=True)
        entries = {p.name for p in self.path.iterdir() if not p.name.endswith(".tmp")}
        previous = self.read_summary()
        if previous is None and entries - BEFORE_SUMMARY:
            traces = sorted(entries & set(TRACES))
            if traces or SUMMARY in entries:
                why = ("summary.json is missing" if SUMMARY not in entries
                       else f"summary.json is unreadable ({self._unreadable()})")
                raise ConfigError([f"{where} holds a run ({', '.join(traces or [SUMMARY])}) but "
                                   f"{why}: its state is unknown, so it is neither resumed nor "
                                   f"overwritten; move it aside or choose another run.output"])
            raise ConfigError([f"{where} holds files that are not a Feedline run's "
                               f"({', '.join(sorted(entries - BEFORE_SUMMARY)[:5])}): a run "
                               f"would write over them; choose an empty or new folder"])
        self._lock = os.open(self.path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            self._lock = None
            raise ConfigError([_in_use(where, previous)]) from None
        try:
            return self._resumes(previous, where) if previous else None
        except ConfigError:
            self.release()
            raise

    def release(self) -> None:
        """Let the folder go (the lock also goes with the process, however it ends)."""
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.close(self._lock)
            self._lock = None

    def read_summary(self) -> RunSummary | None:
        """``summary.json``, or None when it is missing or unreadable."""
        try:
            return RunSummary.from_dict(json.loads(self.summary_path.read_text()))
        except (OSError, ValueError, TypeError, AttributeError):
            return None

    def write_summary(self, summary: RunSummary) -> None:
        """The one writer of ``summary.json`` (strict JSON, atomic). On a full disk, the file
        takes the new text in place (its block has room for a failed run's few more lines), so
        the summary still says why the run ended."""
        try:
            jsonio.write(self.summary_path, summary.as_dict(), indent=2)
        except OSError as exc:
            if exc.errno not in FULL or not self.summary_path.exists():
                raise
            with open(self.summary_path, "r+") as fh:
                fh.write(jsonio.dumps(summary.as_dict(), indent=2))
                fh.truncate()

    def write_config(self, settings: dict[str, Any]) -> list[str]:
        """Write the run's ``config.yaml``. A resumed run whose settings differ from the ones
        its folder last ran with keeps those as ``config-<k>.yaml`` (one per segment) and gets
        back the changes, ``key: old -> new``, for the caller to warn about."""
        path = self.path / CONFIG
        text = yaml.safe_dump(settings, sort_keys=False)
        changed = []
        if path.is_file():
            try:
                before = _flat(yaml.safe_load(path.read_text()) or {})
            except yaml.YAMLError:
                before = {}
            now = _flat(yaml.safe_load(text))
            changed = [f"{key}: {before.get(key)!r} -> {now.get(key)!r}"
                       for key in sorted(before.keys() | now.keys())
                       if before.get(key) != now.get(key)]
            if changed:
                segment = next(k for k in range(1, 10_000)
                               if not (self.path / f"config-{k}.yaml").exists())
                path.replace(self.path / f"config-{segment}.yaml")
        path.write_text(text)
        return changed

    def write_running(self, name: str, epochs: int, resume: str | None) -> None:
        """``summary.json`` while the run goes: which process holds the directory, so that a
        rerun knows a killed one (the status stays ``running``) for what it is."""
        from pipeline.procfs import started

        self.write_summary(RunSummary(
            status="running", name=name, epochs=epochs, pid=os.getpid(),
            pid_start=started(os.getpid()), host=socket.gethostname(),
            started=time.strftime("%Y-%m-%dT%H:%M:%S%z"), resume=resume))

    def write_stopped_at_once(self, signum: int) -> None:
        """A second signal stops the process at once (in its signal handler): a summary that
        still says ``running`` says ``stopped``, with how, so no rerun meets a dead pid."""
        import signal

        summary = self.read_summary()
        if summary is None or summary.status != "running":
            return
        name = signal.Signals(signum).name
        self.write_summary(summary | {
            "status": "stopped", "signal": name,
            "error": f"stopped at once by a second {name}, before the stop finished; the last "
                     f"checkpoint is kept and a rerun into this folder resumes from it"})

    def _unreadable(self) -> str:
        try:
            data = json.loads(self.summary_path.read_text())
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return "not a JSON object" if not isinstance(data, dict) else "it has no status"

    def _resumes(self, previous: RunSummary, where: str) -> str:
        """What the earlier run in the folder was, and where this one resumes it; refused when
        it finished (a live one holds the lock and never reaches here)."""
        status = previous.status
        if status == "succeeded":
            raise ConfigError([f"{where} already holds a finished run; choose another "
                               f"run.output"])
        pid, host = previous.pid, previous.host
        if status == "running" and host == socket.gethostname() and _alive(pid, previous):
            raise ConfigError([_in_use(where, previous)])  # a run that holds no lock (NFS)
        how = {"running": f"ended without a word (process {pid} on {host} is gone: killed?)",
               "stopped": f"was stopped by {previous.signal}",
               "failed": f"failed ({previous.error})",
               "diverged": f"diverged ({previous.error})"}.get(
            status, f"ended as {status!r}")
        from pipeline.job.runner import last_checkpoint

        checkpoint = last_checkpoint(self.path, check=True)
        resume = (f"resuming from its last checkpoint (epoch {checkpoint['epoch']}, after step "
                  f"{checkpoint['step']})" if checkpoint else "no checkpoint: starting again")
        return f"{self.path}: the run there {how}; {resume}"


def _in_use(where: str, previous: RunSummary | None) -> str:
    pid = previous.pid if previous is not None else None
    if not pid:
        return f"{where} is in use by a run still going; wait for it or choose another run.output"
    return (f"{where} is in use by a run still going (process {pid}, started "
            f"{previous.started}); wait for it, stop it (kill -INT {pid}) or choose "
            f"another run.output")


def _alive(pid: Any, summary: RunSummary) -> bool:
    """The process a ``running`` summary names still runs (not another one under its pid)."""
    from pipeline.procfs import started

    return isinstance(pid, int) and started(pid) == summary.pid_start


def _flat(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"train": {"lr": 0.1}}`` as ``{"train.lr": 0.1}``."""
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            out |= _flat(value, f"{prefix}{key}.")
        else:
            out[f"{prefix}{key}"] = value
    return out
