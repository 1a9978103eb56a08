"""Run in a process of its own: a preprocessing node is removed mid-epoch and another added.

A `ray.cluster_utils.Cluster` with two labelled preprocessing nodes and a training node runs a
Feedline job; once the first epoch is under way one preprocessing node (and every actor on it)
is removed and a fresh one joins. Prints one FEEDLINE-RESULT JSON line with the run's summary.
"""

import json
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import pipeline

ROOT = Path(__file__).resolve().parents[2]
PRE = {"feedline.io/role": "preprocess"}
TRAIN = {"feedline.io/role": "train"}


def main(output: str, delay_s: float) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        pre = [cluster.add_node(num_cpus=1, labels=PRE) for _ in range(2)]
        cluster.add_node(num_cpus=2, labels=TRAIN)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        events, outcome = [], {}

        def train() -> None:  # the job runs beside the churn: Cluster.add_node needs this thread
            try:
                outcome["summary"] = pipeline.run(
                    ROOT / "examples" / "quickstart.yaml", show_progress=False, sets=[
                        "train.epochs=3", "train.cpus_per_worker=1", "data.concurrency=[2, 2]",
                        "data.batch_size=4",
                        "data.transform=tests.integration.transforms:slow_preprocessing",
                        "data.placement.labels={feedline.io/role: preprocess}",
                        "train.placement.labels={feedline.io/role: train}",
                        f"run.output={output}"]).summary
            except BaseException as exc:
                outcome["error"] = exc

        job = threading.Thread(target=train, name="feedline-job")
        job.start()
        time.sleep(delay_s)
        cluster.remove_node(pre[0], allow_graceful=False)
        events.append(("removed", time.time()))
        cluster.add_node(num_cpus=1, labels=PRE)
        events.append(("added", time.time()))
        job.join(timeout=400)
        if "error" in outcome:
            raise outcome["error"]
        print("FEEDLINE-RESULT " + json.dumps({"summary": outcome["summary"], "events": events}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
