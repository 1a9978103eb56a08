"""Stopping a run cleanly on Ctrl-C or SIGTERM (driver, main thread; installed by the CLI).

The first SIGINT or SIGTERM raises ``KeyboardInterrupt`` in the main thread wherever it is
(connecting, planning, inside ``trainer.fit()``) and remembers which signal it was. What it
unwinds stops what it started on the way out: the Train run (``pipeline.job.runner``), the Ray it
started (``ray_session``); ``pipeline.run`` then writes ``summary.json`` with ``status:
stopped`` and raises :class:`RunStopped`, and ``pipeline run`` exits 128 + the signal number
(130, 143). A second signal stops at once: the last words registered with :func:`at_once` run
(``pipeline.run`` marks ``summary.json`` stopped, so it never stays ``running`` with a dead pid),
the process exits, and the watchdog of a local Ray it started (:mod:`pipeline.cluster.watchdog`)
stops that Ray's processes within seconds.

Why ``KeyboardInterrupt`` for both signals: the main thread mostly waits in ``ray.get``, and
Ray turns only a ``KeyboardInterrupt`` raised by a signal handler into an interrupted get (any
other exception is printed and dropped). Ray also replaces handlers: ``ray.init`` sets SIGTERM's
to ``sys.exit(15)`` (:func:`keep_sigterm` puts ours back) and Ray Train's ``fit()`` sets
SIGINT's to its own abort (:class:`~pipeline.job.abortable.AbortableTrainer` declines).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

_received: list[int] = []  # the signals of this run's stop, in order
_last_words: list[Callable[[int], None]] = []  # run when a second signal stops at once


def received() -> int | None:
    """The signal that stopped the run, if one did (None for a plain ``KeyboardInterrupt``)."""
    return _received[0] if _received else None


def _say(text: str) -> None:
    os.write(sys.stderr.fileno(), text.encode())  # no locks: the main thread may hold any


def _stopping(signum: int) -> None:
    _received.append(signum)
    name = signal.Signals(signum).name
    again = "Ctrl-C" if signum == signal.SIGINT else name
    _say(f"\n{name}: stopping the run (Train workers, Ray Data, and a Ray this run started); "
         f"{again} again stops at once\n")


def _on_signal(signum: int, frame: Any) -> None:
    if not _received:
        _stopping(signum)
        raise KeyboardInterrupt
    _say(f"\n{signal.Signals(signum).name} again: stopping now\n")
    for words in _last_words:
        try:
            words(signum)
        except BaseException as exc:  # noqa: BLE001 - exiting regardless
            _say(f"could not record the stop: {type(exc).__name__}: {exc}\n")
    os._exit(128 + signum)  # a local Ray's watchdog (pipeline.cluster.watchdog) stops its processes


@contextmanager
def at_once(words: Callable[[int], None]) -> Iterator[None]:
    """Within the block, ``words(signum)`` runs if a second signal stops the process at once
    (in the signal handler: keep it short, files only)."""
    _last_words.append(words)
    try:
        yield
    finally:
        _last_words.remove(words)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGINT and SIGTERM stop the run for the duration of the block (main thread only)."""
    _received.clear()
    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextmanager
def keep_sigterm() -> Iterator[None]:
    """Around ``ray.init``, which sets SIGTERM's handler to ``sys.exit(15)`` for the whole
    process: put the previous handler back, and when it was ours, take that exit (a SIGTERM
    while Ray started) as the stop it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    try:
        yield
    except SystemExit as exc:
        if previous is not _on_signal or exc.code != signal.SIGTERM:
            raise
        _stopping(signal.SIGTERM)
        raise KeyboardInterrupt from exc
    finally:
        signal.signal(signal.SIGTERM, previous)
