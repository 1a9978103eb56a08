"""Run in a process of its own: a preprocessing node is removed mid-epoch and another added.

A `ray.cluster_utils.Cluster` with two labelled preprocessing nodes and a training node runs a
Feedline job; once one preprocessing node has decoded a few batches (``delay_s`` later) it is
removed with every actor on it, mid-work, and a fresh one joins. Prints one FEEDLINE-RESULT JSON
line with the run's summary, the events (with the removed node's id) and the per-batch node log
of the preprocessing.
"""

import json
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run as a script: the tests package sits beside pipeline

import pipeline  # noqa: E402
from tests.integration.transforms import NODE_LOG  # noqa: E402

PRE = {"feedline.io/role": "preprocess"}
TRAIN = {"feedline.io/role": "train"}
# the GCS declares the removed node dead after 3 missed 1 s checks, not Ray's default 5 missed
# 3 s checks (10 s timeout each): what the test judges does not depend on it, and the job's first
# batch came after 14 s with these against 30 s with the defaults
HEALTH_CHECKS = {"health_check_period_ms": 1000, "health_check_timeout_ms": 1000,
                 "health_check_failure_threshold": 3}


def main(output: str, delay_s: float) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "_system_config": HEALTH_CHECKS})
    try:
        pre = [cluster.add_node(num_cpus=1, labels=PRE) for _ in range(2)]
        cluster.add_node(num_cpus=2, labels=TRAIN)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        events, outcome = [], {}
        NODE_LOG.write_text("")  # the transform logs only into a file that exists

        def train() -> None:  # the job runs beside the churn: Cluster.add_node needs this thread
            try:
                outcome["summary"] = pipeline.run(
                    ROOT / "examples" / "quickstart.yaml", show_progress=False, sets=[
                        "train.epochs=3", "train.cpus_per_worker=1", "data.concurrency=[2, 2]",
                        "data.decode_batch_size=4",
                        "data.transform=tests.integration.transforms:slow_preprocessing_logged",
                        "data.placement.labels={feedline.io/role: preprocess}",
                        "train.placement.labels={feedline.io/role: train}",
                        f"run.output={output}"]).summary
            except BaseException as exc:
                outcome["error"] = exc

        job = threading.Thread(target=train, name="feedline-job")
        job.start()
        removed = pre[0].node_id
        deadline = time.time() + 300
        while sum(line.startswith(removed) for line in NODE_LOG.read_text().splitlines()) < 3:
            if time.time() > deadline or not job.is_alive():
                raise RuntimeError(f"node {removed} decoded no batches in time")
            time.sleep(0.1)
        time.sleep(delay_s)
        removing = time.time()
        cluster.remove_node(pre[0], allow_graceful=False)
        events.append(("removed", removing, time.time(), removed))
        cluster.add_node(num_cpus=1, labels=PRE)
        events.append(("added", time.time()))
        job.join(timeout=400)
        if "error" in outcome:
            raise outcome["error"]
        batches = [line.split("\t") for line in NODE_LOG.read_text().splitlines()]
        print("FEEDLINE-RESULT " + json.dumps({"summary": dict(outcome["summary"]),
                                               "events": events, "batches": batches}))
    finally:
        NODE_LOG.unlink(missing_ok=True)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
