"""The local Ray's watchdog's terminate (real processes, real signals): every process that
carries the token hears SIGTERM, then SIGKILL, whatever its name.

The watchdog process itself (a driver's death, its release after ``ray.shutdown``) is tested in
tests/integration/test_watchdog.py.
"""

import os
import signal
import subprocess
import sys

import pytest

from pipeline.cluster import watchdog
from pipeline.cluster.watchdog import OWNER, RayProcesses, terminate
from pipeline.procfs import stat


@pytest.mark.timeout(30)
def test_every_process_gets_each_signal_even_when_a_scan_outlasts_the_wait(monkeypatch):
    # grace_s=0: the wait is over before the first scan of /proc returns, as when a scan on a
    # loaded machine takes longer than the grace; the process still gets SIGTERM, then SIGKILL.
    # The signals sent are seen on their way to the real os.kill: a handler in the child that
    # notes SIGTERM may not run before SIGKILL ends it (a flake of an earlier version)
    sent, kill = [], os.kill
    monkeypatch.setattr(watchdog.os, "kill", lambda pid, sig: (sent.append((pid, sig)),
                                                               kill(pid, sig)))
    stubborn = subprocess.Popen(
        [sys.executable, "-c", "import signal, time\n"
         "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
         "print('ready', flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env=os.environ | {OWNER: "test-token-3"})
    try:
        assert stubborn.stdout.readline().strip() == "ready"
        assert terminate(RayProcesses("test-token-3"), grace_s=0) == [stubborn.pid]
        assert stubborn.wait(timeout=10) == -signal.SIGKILL
        ours = [sig for pid, sig in sent if pid == stubborn.pid]
        assert ours[0] == signal.SIGTERM and signal.SIGKILL in ours, ours
    finally:
        stubborn.kill()
        stubborn.wait()


@pytest.mark.timeout(30)
def test_a_process_whose_name_is_cut_mid_character_is_terminated_too():
    # the kernel keeps 15 bytes of a process's name: "ray::Décodeur" (an actor of a user's
    # class) becomes bytes that are not UTF-8; reading them must not stop the watchdog
    named = subprocess.Popen(
        [sys.executable, "-c", "import pathlib, time\n"
         "pathlib.Path('/proc/self/comm').write_bytes('ray::Décodeur'.encode()[:12] + b'\\xc3')\n"
         "print('ready', flush=True)\ntime.sleep(600)"],
        stdout=subprocess.PIPE, text=True, env=os.environ | {OWNER: "test-token-4"})
    try:
        assert named.stdout.readline().strip() == "ready"
        assert stat(named.pid).name.startswith("ray::D")
        assert terminate(RayProcesses("test-token-4")) == [named.pid]
        assert named.wait(timeout=10) == -signal.SIGTERM
    finally:
        named.kill()
        named.wait()
