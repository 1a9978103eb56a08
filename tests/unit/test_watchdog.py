"""The local Ray's watchdog (real processes, real SIGKILL): when the driver dies, the processes
under the roots it was given go, those that ignore SIGTERM included, and nothing else does."""

import os
import signal
import subprocess
import sys
import time

import pytest

from pipeline.procfs import alive, stat
from pipeline.watchdog import terminate

# a "driver" that starts a "raylet", which starts an "agent" that ignores SIGTERM (as agents
# busy in C++ do) and would outlive both; it prints the raylet's and the agent's pids
DRIVER = """
import subprocess, sys, time
agent = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
raylet = subprocess.Popen([sys.executable, "-c", f'''
import subprocess, sys, time
a = subprocess.Popen([sys.executable, "-c", {agent!r}])
print(a.pid, flush=True)
time.sleep(600)'''], stdout=subprocess.PIPE, text=True)
print(raylet.pid, raylet.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def wait_gone(pids, within_s):
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


@pytest.mark.timeout(60)
def test_the_driver_killed_its_processes_go_within_seconds():
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True)
    raylet, agent = (int(p) for p in driver.stdout.readline().split())
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    watchdog = subprocess.Popen([sys.executable, "-m", "pipeline.watchdog", str(driver.pid),
                                 str(raylet)], stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    try:
        time.sleep(1.5)  # a few polls: the watchdog has seen the tree
        assert watchdog.poll() is None and alive(agent)
        driver.kill()
        driver.wait()
        assert wait_gone([raylet, agent], within_s=10) == []
        assert watchdog.wait(timeout=10) == 0
        said = watchdog.stderr.read()
        assert f"driver {driver.pid} exited without stopping its Ray; terminated 2 processes" \
            in said, said
        assert alive(bystander.pid)  # not under the roots: not the watchdog's business
    finally:
        for pid in (raylet, agent):
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        bystander.kill()
        watchdog.kill()


@pytest.mark.timeout(30)
def test_a_reused_pid_is_left_alone():
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        time.sleep(0.2)
        # recorded with another start time: the process seen then is gone, this one is new
        assert terminate({other.pid: stat(other.pid).start - 1}, grace_s=0.5) == []
        assert other.poll() is None
    finally:
        other.kill()
