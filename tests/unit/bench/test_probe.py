"""The benchmark's probe counts the CPU of descendants (a grandchild here, like a Ray worker
under the raylet), not only its own, and excludes what happened before the block began."""

import subprocess
import sys
import time

from pipeline.bench._probe import TreeProbe

BURN = ("import time\n"
        "t = time.process_time()\n"
        "while time.process_time() - t < 0.5: pass\n"
        "print('done', time.process_time(), flush=True)\n"
        "input()\n")


def test_cpu_of_a_grandchild_is_counted_and_earlier_cpu_is_not():
    before = time.process_time()
    while time.process_time() - before < 0.6:  # the driver's own work before the block
        pass
    with TreeProbe(interval_s=0.05) as probe:
        # `; true` keeps the shell alive, so python is a grandchild of this process
        shell = subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "{BURN}"; true'],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            word, child_cpu = shell.stdout.readline().split()
            cpu = probe.cpu_seconds()
        finally:
            shell.communicate("\n", timeout=30)
    assert word == "done"
    # the 0.5 s the grandchild burned is counted (its start-up only from the probe's first
    # look at it); the driver's 0.6 s came before the block and is not
    assert 0.4 <= cpu < float(child_cpu) + 0.45, (cpu, child_cpu)
    assert probe.peak_pss > 0 and not probe.ray_in_tree
