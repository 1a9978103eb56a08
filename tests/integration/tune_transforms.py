"""A slow preprocessing injection for ``pipeline tune``'s test and benchmark (Ray Data workers).

The cost is a sleep per sample, so it does not depend on ``data.decode_batch_size`` and more decode
actors recover it even on a machine with few cores (sleeping actors need no CPU).
"""

import time

SECONDS_PER_SAMPLE = 0.01


def slow_decode(batch):
    """Preprocessing that cannot keep up with one actor: 10 ms per sample."""
    time.sleep(SECONDS_PER_SAMPLE * len(next(iter(batch.values()))))
    return batch
