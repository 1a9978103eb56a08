"""Run in a process of its own: a multi-node `ray.cluster_utils.Cluster` on this machine with
two preprocessing nodes and one training node (labels as in cluster.yaml, plus a fake resource),
one Feedline job on it, and where every actor and decoding process ran. Prints one JSON line;
the cluster is shut down by its owner.

The job also exercises the decode pool controller (``data.autoscale``): a sleep per sample
makes one decode task at a time feed under a third of what the two trainers eat, and the pool
starts at one. Once a whole epoch has run after the pool's last growth (it shows the grown pool
feeding the trainers), each training step gets slower (a heavier model), so the actors idle and
the pool should shrink back. No validation: nothing here reads it, and without it every epoch
starts the moment the last one's pass ends, before the driver has drained the ranks' last pulses:
the pool's shrink must still reach the next epoch (``pipeline.train.loop.await_verdict``)."""

import json
import shutil
import sys
import threading
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

import pipeline
from pipeline.data.sources.digits import write_digits

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # a script's path is its folder; Ray's workers import from ROOT
from tests.integration.elastic_transforms import CONTROL, WHERE, set_costs  # noqa: E402

PRE = {"feedline.io/role": "preprocess"}
TRAIN = {"feedline.io/role": "train"}
# per sample: 56 samples/s per actor; the trainers eat ~190 at STEP_S (0.17 s a step, measured),
# so one actor delivers ~30%, the controller grows the pool to ceil(1 / 0.3) = 4 actors, and
# four feed the trainers with a sixth to spare. (At 40/s one actor delivered 21%, the growth
# hit its 4x cap, and four actors fell short of the demand.)
DECODE_S = 0.018
STEP_S, HEAVY_STEP_S = 0.15, 0.35  # per training step of 16 samples per rank
PER_CLASS = 90  # 900 of the 1,797 digits


def heavier_once_fed(metrics: Path, changed: dict) -> None:
    """Make every step heavier once the pool has grown and a whole epoch has run since its last
    growth: two epochs ended after it (the one it grew in, and the next)."""
    while True:
        time.sleep(0.5)
        records = ([json.loads(x) for x in metrics.read_text().splitlines()]
                   if metrics.exists() else [])
        grows = [i for i, r in enumerate(records) if r.get("action") == "grow"]
        if grows and sum("train_loss" in r for r in records[grows[-1]:]) >= 2:
            set_costs(step_s=HEAVY_STEP_S)
            changed["t"] = time.time()
            return


def digits_subset(folder: Path, per_class: int) -> Path:
    """The quickstart's digits, ``per_class`` of each (links, an image folder): epochs half as
    long as the whole set's, each still many of the controller's windows."""
    root = write_digits(Path("~/.cache/feedline/digits"))
    for label in sorted(p.name for p in root.iterdir() if p.is_dir()):
        (folder / label).mkdir(parents=True)
        for image in sorted((root / label).glob("*.png"))[:per_class]:
            (folder / label / image.name).symlink_to(image)
    return folder


def main(output: str) -> None:
    set_costs(decode_s=DECODE_S, step_s=STEP_S)
    shutil.rmtree(WHERE, ignore_errors=True)
    WHERE.mkdir()
    images = digits_subset(Path(output).parent / "digits", PER_CLASS)
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    changed: dict = {}
    try:
        pre_nodes = [cluster.add_node(num_cpus=2, labels=PRE) for _ in range(2)]
        train_node = cluster.add_node(num_cpus=2, labels=TRAIN, resources={"fake_gpu": 2})
        cluster.wait_for_nodes()
        ray.init(address=cluster.address)
        threading.Thread(target=heavier_once_fed,
                         args=(Path(output) / "metrics.jsonl", changed), daemon=True).start()
        result = pipeline.run(ROOT / "examples" / "quickstart.yaml", show_progress=False, sets=[
            "train.epochs=4", "train.batch_size=16", "train.cpus_per_worker=1",
            "train.model=tests.integration.elastic_transforms:paced_cnn",
            f"data.source={{kind: image_folder, path: {images}}}",
            # 32 rows a task: starting a decode task costs tens of ms on this loaded machine
            "data.cache=off", "data.val_fraction=0", "data.decode_batch_size=32",
            "data.concurrency=[1, 8]", "data.cpus_per_actor=0.5",
            "data.transform=tests.integration.elastic_transforms:injected",
            "data.placement.labels={feedline.io/role: preprocess}",
            "train.placement.labels={feedline.io/role: train}",
            "train.placement.resources={fake_gpu: 1}", f"run.output={output}"])
        actors = [{"class": a.get("ActorClassName") or a.get("ClassName", ""),
                   "node": (a.get("Address") or {}).get("NodeID")}
                  for a in ray._private.state.actors().values()]
        print("FEEDLINE-RESULT " + json.dumps({
            "summary": dict(result.summary), "actors": actors, "heavier_at": changed.get("t"),
            "decoders": {f.name: f.read_text() for f in WHERE.iterdir()},
            "pre_nodes": [n.node_id for n in pre_nodes], "train_node": train_node.node_id}))
    finally:
        CONTROL.unlink(missing_ok=True)
        shutil.rmtree(WHERE, ignore_errors=True)
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
