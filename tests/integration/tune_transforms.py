"""Slow preprocessing injections for ``pipeline tune``'s test and benchmark (Ray Data workers).

``slow_decode`` and ``waiting_decode`` sleep per sample, as a read from object storage waits:
the cost does not depend on ``data.decode_batch_size``, and more decode actors recover it even on
a machine with few cores (sleeping actors need no CPU). ``computing_decode`` spins the CPU for
the same time a sample: only more CPUs (or decoding less often) recover it.
"""

import time

SECONDS_PER_SAMPLE = 0.01
WAIT_S = COMPUTE_S = 0.006  # a sample: issue 31's case


def slow_decode(batch):
    """Preprocessing that cannot keep up with one actor: 10 ms per sample."""
    time.sleep(SECONDS_PER_SAMPLE * len(next(iter(batch.values()))))
    return batch


def waiting_decode(batch):
    """6 ms a sample of waiting (I/O): the actor is busy, its CPU idle."""
    time.sleep(WAIT_S * len(next(iter(batch.values()))))
    return batch


def computing_decode(batch):
    """6 ms a sample of computing: the actor is busy and so is its CPU."""
    end = time.perf_counter() + COMPUTE_S * len(next(iter(batch.values())))
    spins = 0
    while time.perf_counter() < end:
        spins += 1
    return batch
