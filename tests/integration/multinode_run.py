"""Run in a process of its own: a multi-node `ray.cluster_utils.Cluster` on this machine with
two preprocessing nodes and one training node (labels + a fake resource), one Feedline job on
it, and where every actor ran. Prints one JSON line; the cluster is shut down by its owner."""

import json
import sys
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import pipeline

ROOT = Path(__file__).resolve().parents[2]
PRE = {"feedline.io/role": "preprocess"}
TRAIN = {"feedline.io/role": "train"}


def main(output: str) -> None:
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    try:
        pre_nodes = [cluster.add_node(num_cpus=2, labels=PRE) for _ in range(2)]
        train_node = cluster.add_node(num_cpus=2, labels=TRAIN, resources={"fake_gpu": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        result = pipeline.run(ROOT / "examples" / "quickstart.yaml", show_progress=False, sets=[
            "train.epochs=1", "train.cpus_per_worker=1", "data.concurrency=[2, 4]",
            "data.placement.labels={feedline.io/role: preprocess}",
            "train.placement.labels={feedline.io/role: train}",
            "train.placement.resources={fake_gpu: 1}", f"run.output={output}"])
        actors = [{"class": a.get("ActorClassName") or a.get("ClassName", ""),
                   "node": (a.get("Address") or {}).get("NodeID")}
                  for a in ray._private.state.actors().values()]
        print("FEEDLINE-RESULT " + json.dumps({
            "summary": result.summary, "actors": actors,
            "pre_nodes": [n.node_id for n in pre_nodes], "train_node": train_node.node_id}))
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
