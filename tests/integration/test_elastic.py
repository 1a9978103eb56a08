"""The decode pool controller's two actuators on real Ray 2.60: the CPU limit a running Ray Data
execution reads again (pipeline.pool.live_limits), and Ray's autoscaler asked for preprocessing
nodes (pipeline.pool.controller). The whole loop in a Train job runs in test_multinode.py."""

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.job.inbox import RunInbox
from pipeline.pool.live_limits import POLL_S, LiveLimits, LivePool

ROOT = Path(__file__).resolve().parents[2]


class Slow:
    """A decode actor: 10 ms per row, and which process decoded it."""

    def __call__(self, batch):
        time.sleep(0.01 * len(batch["id"]))
        return batch | {"pid": np.full(len(batch["id"]), os.getpid())}


@pytest.mark.timeout(180)
def test_a_raised_limit_grows_a_running_pool_and_the_next_execution_starts_there(ray_cluster):
    import ray
    import ray.data
    from ray.data import ExecutionResources

    board = RunInbox.remote()
    ray.get(board.set_pool_cpus.remote(1.0))  # one actor of 1 CPU
    blocks = [pa.table({"id": np.arange(i * 8, i * 8 + 8)}) for i in range(160)]
    ds = ray.data.from_blocks(blocks).map_batches(
        Slow, batch_size=8, num_cpus=1,
        compute=LivePool(board=board, cpus_per_actor=1.0, min_size=1, max_size=4))
    ds.context.execution_options = LiveLimits(board=board, resource_limits=ExecutionResources())
    ds.context.enable_progress_bars = False
    splits = ds.streaming_split(2, equal=True)  # as Ray Train runs it: in a SplitCoordinator

    def epoch(raise_after: int | None = None) -> list[set[int]]:
        """Each split's pids, in rows taken before and after the limit is raised."""
        phases: list[list[int]] = [[], []]
        taken = [0]
        lock = threading.Lock()

        def consume(split):
            for batch in split.iter_batches(batch_size=8):
                with lock:
                    taken[0] += 8
                    late = raise_after is not None and taken[0] > raise_after
                    phases[late].extend(batch["pid"].tolist())
                    if raise_after is not None and taken[0] == raise_after:
                        ray.get(board.set_pool_cpus.remote(4.0))

        threads = [threading.Thread(target=consume, args=(s,)) for s in splits]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150)
        return [set(p) for p in phases]

    before, after = epoch(raise_after=160)  # 20 blocks at one actor, then 4 CPUs
    assert len(before) == 1, before
    assert len(after - before) >= 2, (before, after)  # Ray Data added actors into the limit
    # the next execution (the next streamed epoch) starts with the pool the limit holds
    ray.get(board.set_pool_cpus.remote(2.0))
    time.sleep(3 * POLL_S)  # the executing process reads the limit every POLL_S
    pids = set().union(*epoch())
    assert len(pids) == 2, pids
    ray.kill(board)


@pytest.mark.timeout(300)
def test_the_controller_asks_the_autoscaler_for_preprocessing_nodes_only(tmp_path):
    # Its own process and its own cluster (Ray's fake multi-node provider): see the script.
    out = subprocess.run([sys.executable, str(ROOT / "tests/integration/autoscaler_run.py"),
                          str(tmp_path)], capture_output=True, text=True, timeout=280,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("FEEDLINE-RESULT ")]
    got = json.loads(line.removeprefix("FEEDLINE-RESULT "))
    assert got["before"] == {"preprocess": [], "train": []}
    # starving trainers, a busy actor, no preprocessing CPUs: bundles of the placement only
    assert got["request"] == [[{"CPU": 1.0, "feedline_preprocess": 0.001}, 4]]
    # (the one actor it starts with has no CPU either: asked for at once, then for the grown
    # pool once a settled window showed the shortage)
    assert [(d["action"], d["size_after"]) for d in got["decisions"]] == [
        ("request", 1), ("grow", 4), ("request", 4), ("withdraw", 4)]
    # a preprocessing node came and a decode-shaped actor ran on it; never a training node
    assert got["decode_node"] in got["preprocess"]
    assert got["train_during"] == [] and got["train_ever"] == []
    assert got["limit"] == 4.0  # the pool's CPU limit followed the new nodes' CPUs
    assert got["request_while_waiting"] == got["request"]  # nodes there, trainers still wait
    assert got["request_after"] == [] and got["removed"]  # fed: withdrawn, idle nodes go
