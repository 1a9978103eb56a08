"""Unit tests never start Ray and never sleep.

``ray.init`` raises so a test cannot start Ray by accident. ``time.sleep`` raises when test code
calls it (a file under ``tests/unit``, in any thread): a sleep makes a unit test slow, and one
that waits for something to happen is flaky on a loaded machine. Library code keeps the real
``time.sleep``: ``subprocess.Popen.wait(timeout=...)`` polls with it, and so do the code under
test's own waits (the watchdog's scans, a copy's backoff). Spawned processes do not run these
fixtures; a ``sleep`` in a child process's script is another process's business.
"""

import os
import sys
import time

import pytest

UNIT_TESTS = os.path.dirname(os.path.abspath(__file__)) + os.sep

NO_SLEEP = ("unit tests do not sleep: drive a fake clock (tests/unit/train/fake_worker.py's "
            "VirtualClock, passed as clock= to StepProfiler or CommTimer), wait for the event "
            "itself with a deadline (threading.Event.wait, Popen.wait(timeout=...)), or move the "
            "test to tests/integration")


@pytest.fixture(autouse=True)
def _forbid_ray_init(monkeypatch):
    try:
        import ray
    except ImportError:  # a torch-only machine (the GPU box) has no Ray
        return

    def refuse(*args, **kwargs):
        raise RuntimeError("unit tests must not start Ray; move this test to tests/integration")

    monkeypatch.setattr(ray, "init", refuse)


@pytest.fixture(autouse=True)
def _forbid_sleep(monkeypatch):
    real_sleep = time.sleep

    def sleep(seconds):
        if sys._getframe(1).f_code.co_filename.startswith(UNIT_TESTS):
            raise RuntimeError(NO_SLEEP)
        return real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
