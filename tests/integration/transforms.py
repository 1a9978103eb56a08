"""User transforms for the integration tests (imported inside Ray Data workers)."""

import json
import os
import tempfile
from pathlib import Path


def scale_features(batch):
    batch["features"] = batch["features"] * 0.5
    return batch


def slow_preprocessing(batch):
    """Preprocessing that cannot keep up: 40 ms per batch of 8 images."""
    import time

    time.sleep(0.04)
    return batch


NODE_LOG = Path(tempfile.gettempdir()) / "feedline-test-node-log.tsv"


def slow_preprocessing_logged(batch):
    """:func:`slow_preprocessing` that appends ``node id, start, end`` per batch to
    ``NODE_LOG`` (when it exists), so a test can tell which node held work when."""
    import time

    import ray

    start = time.time()
    slow_preprocessing(batch)
    if NODE_LOG.exists():
        node = ray.get_runtime_context().get_node_id()
        with open(NODE_LOG, "a") as fh:  # one short line per write: appends do not interleave
            fh.write(f"{node}\t{start:.3f}\t{time.time():.3f}\n")
    return batch


def slow_rows(batch):
    """Preprocessing that cannot keep up, whatever the batch: 60 ms per row (parquet sources
    hand the transform whole files, images a batch of samples)."""
    import time

    time.sleep(0.06 * len(batch["id"]))
    return batch


KILL_PLAN = Path(tempfile.gettempdir()) / "feedline-test-kill-plan.json"
_seen = 0


def kill_once(batch):
    """Kill this decoding process once, after it has produced ``after`` samples.

    The plan is a file the test writes (workers were started before the test ran, so they
    cannot take it from the environment); ``done`` marks that the kill happened."""
    global _seen
    _seen += len(batch["id"])
    if KILL_PLAN.exists():
        plan = json.loads(KILL_PLAN.read_text())
        done = Path(plan["done"])
        if _seen >= plan["after"] and not done.exists():
            done.write_text(str(os.getpid()))
            os._exit(1)
    return batch
