"""The local Ray's watchdog (real processes, real SIGKILL): when the driver dies, the processes
that carry its Ray's token go, those that ignore SIGTERM and orphans included, and nothing
else does; released by the driver after ``ray.shutdown``, it stops what outlived that; handed
the Ray by a driver that exits without shutting it down, it stops it once the driver is gone.

Real ``python -m pipeline.cluster.watchdog`` processes that wait out their grace periods (seconds
each), hence here rather than in the unit tests (tests/unit/cluster/test_watchdog.py tests its
terminate on its own).
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.cluster.watchdog import GRACE_S, LEAVE_S, OWNER, RayProcesses
from pipeline.procfs import alive, stat

# a "driver" that starts a "raylet", which starts an "agent" that ignores SIGTERM (as agents
# busy in C++ do) and a "worker" whose parent exits at once (as a worker the raylet was starting
# when it died: an orphan, re-parented to init); it prints the three pids
DRIVER = """
import subprocess, sys, time
agent = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"
worker = "import time; time.sleep(600)"
starter = f"import subprocess, sys; print(subprocess.Popen([sys.executable, '-c', {worker!r}]).pid)"
raylet = subprocess.Popen([sys.executable, "-c", f'''
import subprocess, sys, time
a = subprocess.Popen([sys.executable, "-c", {agent!r}])
starter = subprocess.Popen([sys.executable, "-c", {starter!r}], stdout=subprocess.PIPE, text=True)
print(a.pid, starter.stdout.readline().strip(), flush=True)
starter.wait()
time.sleep(600)'''], stdout=subprocess.PIPE, text=True)
print(raylet.pid, raylet.stdout.readline().strip(), flush=True)
time.sleep(600)
"""

# a "driver" whose "raylet" starts an "agent" without the token in its environment (as Ray's
# agents show it once their process title has overwritten it); it prints the two pids
TOKENLESS_AGENT = f"""
import subprocess, sys, time
agent = "import os, subprocess, sys, time; " \\
    "env = {{k: v for k, v in os.environ.items() if k != '{OWNER}'}}; " \\
    "print(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'], " \\
    "env=env).pid, flush=True)"
raylet = subprocess.Popen([sys.executable, "-c", agent + "; time.sleep(600)"],
                          stdout=subprocess.PIPE, text=True)
print(raylet.pid, raylet.stdout.readline().strip(), flush=True)
time.sleep(600)
"""


def wait_gone(pids, within_s):
    deadline = time.monotonic() + within_s
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def start_run(token):
    """The fake driver with its three processes, two bystanders, and the watchdog."""
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdout=subprocess.PIPE, text=True,
                              env=os.environ | {OWNER: token})
    ours = [int(p) for p in driver.stdout.readline().split()]
    bystanders = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                                   env=os.environ | extra)
                  for extra in ({}, {OWNER: "another-run"})]
    watchdog = subprocess.Popen([sys.executable, "-m", "pipeline.cluster.watchdog", str(driver.pid),
                                 token], stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
    return driver, ours, bystanders, watchdog


def watching(watchdog):
    """Wait for the watchdog's first line: its signal handlers are in place and it has scanned
    the driver's Ray once."""
    line = watchdog.stderr.readline()
    assert line.startswith("feedline watchdog: watching driver"), line + watchdog.stderr.read()


def clean_up(driver, ours, bystanders, watchdog):
    for pid in ours:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)
    for proc in (driver, *bystanders, watchdog):
        proc.kill()
        proc.wait()


@pytest.mark.timeout(60)
def test_released_after_shutdown_it_stops_what_outlived_it_and_the_driver_may_die_meanwhile():
    driver, ours, bystanders, watchdog = run = start_run("test-token-2")
    try:
        watching(watchdog)
        watchdog.terminate()  # what the driver does after ray.shutdown
        driver.kill()  # a second Ctrl-C while the watchdog waits for the leftovers to go
        driver.wait()
        assert wait_gone(ours, within_s=LEAVE_S + GRACE_S + 5) == []
        assert watchdog.wait(timeout=10) == 0
        said = watchdog.stderr.read()
        assert f"3 processes outlived ray.shutdown of driver {driver.pid}" in said, said
        assert all(b.poll() is None for b in bystanders)
    finally:
        clean_up(*run)


@pytest.mark.timeout(60)
def test_the_driver_killed_its_processes_go_within_seconds():
    driver, ours, bystanders, watchdog = run = start_run("test-token-1")
    try:
        watching(watchdog)
        assert watchdog.poll() is None and all(alive(p) for p in ours)
        assert stat(ours[2]).ppid not in (driver.pid, ours[0])  # an orphan: no tree finds it
        driver.kill()
        driver.wait()
        assert wait_gone(ours, within_s=10) == []
        assert watchdog.wait(timeout=10) == 0
        said = watchdog.stderr.read()
        assert f"driver {driver.pid} exited without stopping its Ray; terminated 3 processes" \
            in said, said
        assert all(b.poll() is None for b in bystanders)  # no token, or another run's
    finally:
        clean_up(*run)


@pytest.mark.timeout(60)
def test_handed_over_it_waits_for_the_driver_to_exit_then_stops_its_ray():
    driver, ours, bystanders, watchdog = run = start_run("test-token-4")
    try:
        watching(watchdog)
        watchdog.send_signal(signal.SIGUSR1)  # the run is done; the driver exits on its own
        time.sleep(1.0)
        assert watchdog.poll() is None and all(alive(p) for p in ours)  # not while it lives
        driver.kill()
        driver.wait()
        assert wait_gone(ours, within_s=10) == []
        assert watchdog.wait(timeout=10) == 0
        said = watchdog.stderr.read()
        assert f"driver {driver.pid} finished and left its Ray to the watchdog; terminated 3 " \
               f"processes" in said, said
        assert all(b.poll() is None for b in bystanders)
    finally:
        clean_up(*run)


@pytest.mark.timeout(60)
def test_an_agent_whose_environment_lost_the_token_goes_though_its_raylet_went_first():
    # the driver's death takes the raylet along (fate sharing) and leaves the agent an orphan
    # without the token: the watchdog knew it as the raylet's child
    driver = subprocess.Popen([sys.executable, "-c", TOKENLESS_AGENT], stdout=subprocess.PIPE,
                              text=True, env=os.environ | {OWNER: "test-token-5"})
    raylet, agent = (int(p) for p in driver.stdout.readline().split())
    watchdog = subprocess.Popen([sys.executable, "-m", "pipeline.cluster.watchdog",
                                 str(driver.pid), "test-token-5"], stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    try:
        assert f"{OWNER}=".encode() not in Path(f"/proc/{agent}/environ").read_bytes()
        assert RayProcesses("test-token-5").scan().keys() == {driver.pid, raylet, agent}
        watching(watchdog)  # the watchdog has scanned while the raylet lived
        os.kill(raylet, signal.SIGKILL)
        driver.kill()
        driver.wait()
        assert wait_gone([agent], within_s=10) == []
        assert watchdog.wait(timeout=10) == 0
        said = watchdog.stderr.read()
        assert f"driver {driver.pid} exited without stopping its Ray" in said, said
    finally:
        clean_up(driver, [raylet, agent], [], watchdog)
