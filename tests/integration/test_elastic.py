"""The decode pool controller's two actuators on real Ray 2.60: the CPU limit a running Ray Data
execution reads again, which bounds its decode tasks (pipeline.pool.live_limits), and Ray's
autoscaler asked for preprocessing nodes (pipeline.pool.controller). The whole loop in a Train
job runs in test_multinode.py."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from pipeline.job.inbox import RunInbox
from pipeline.pool.live_limits import POLL_S, LiveLimits

ROOT = Path(__file__).resolve().parents[2]


def slow(batch):
    """A decode task: 10 ms per row; when it ran (wall clock: one machine, many processes)."""
    begin = time.time()
    time.sleep(0.01 * len(batch["id"]))
    n = len(batch["id"])
    return batch | {"begin": np.full(n, begin), "end": np.full(n, time.time())}


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (begin, end) that overlap at one instant."""
    events = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in events:
        running += step
        peak = max(peak, running)
    return peak


@pytest.mark.timeout(180)
def test_the_limit_moves_a_running_executions_decode_tasks_both_ways(ray_cluster):
    import ray
    import ray.data
    from ray.data import ExecutionResources

    board = RunInbox.remote()
    ray.get(board.set_pool_cpus.remote(1.0))  # one task of 1 CPU at a time
    blocks = [pa.table({"id": np.arange(i * 8, i * 8 + 8)}) for i in range(160)]
    ds = ray.data.from_blocks(blocks).map_batches(
        slow, batch_size=8, num_cpus=1, compute=ray.data.TaskPoolStrategy(size=4))
    ds.context.execution_options = LiveLimits(board=board, resource_limits=ExecutionResources())
    ds.context.enable_progress_bars = False
    splits = ds.streaming_split(2, equal=True)  # as Ray Train runs it: in a SplitCoordinator

    def epoch(grow_at: int | None = None) -> tuple[list[tuple[float, float]], list[float]]:
        """The execution's decode calls (begin, end), and when the limit moved: once
        ``grow_at`` rows were taken from 1 to 4 CPUs, and back to 1 once four tasks ran at once
        (new processes take seconds to start on a busy machine: the phase lasts as long)."""
        spans: list[tuple[float, float]] = []
        changes: list[float] = []
        taken = [0]
        lock = threading.Lock()

        def consume(split):
            for batch in split.iter_batches(batch_size=8):
                with lock:
                    taken[0] += 8
                    spans.append((batch["begin"][0], batch["end"][0]))
                    if grow_at is None:
                        continue
                    if not changes and taken[0] >= grow_at:
                        ray.get(board.set_pool_cpus.remote(4.0))
                        changes.append(time.time())
                    elif len(changes) == 1 and most_at_once(
                            [x for x in spans if x[0] >= changes[0]]) == 4:
                        ray.get(board.set_pool_cpus.remote(1.0))
                        changes.append(time.time())

        threads = [threading.Thread(target=consume, args=(s,)) for s in splits]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=150)
        return spans, changes

    # 20 blocks at 1 CPU, then 4 until four run at once, then 1 again; a task begun a second
    # or two after a change runs under it (the limit is read every POLL_S, the budget every 1 s)
    spans, (grown, shrunk) = epoch(grow_at=160)
    assert most_at_once([x for x in spans if x[0] < grown]) == 1
    after = [x for x in spans if x[0] > shrunk + 2.0]
    assert len(after) >= 10 and most_at_once(after) == 1  # shrunk within the execution
    # the next execution (the next streamed epoch) runs at the limit as it is
    ray.get(board.set_pool_cpus.remote(2.0))
    time.sleep(3 * POLL_S)  # the executing process reads the limit every POLL_S
    spans, _ = epoch()
    assert most_at_once(spans) == 2
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
