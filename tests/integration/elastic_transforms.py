"""Costs a test or benchmark changes while a run goes on (imported inside Ray workers): a sleep
per decoded sample (:func:`injected`, a ``data.transform``) and a sleep per training step
(:func:`paced_cnn`, a ``train.model``), both read from one small JSON file before every batch
or step. Sleeps, so more decode actors recover the decode cost even on 2 cores (sleeping actors
need no CPU) and the trainers' pace does not depend on what else runs on the machine."""

import json
import os
import tempfile
import time
from pathlib import Path

CONTROL = Path(os.environ.get("FEEDLINE_COST_FILE",
                              Path(tempfile.gettempdir()) / "feedline-costs.json"))
# where decoding ran, when this folder exists: a file per decoding process, holding its node id
WHERE = CONTROL.with_suffix(".where")


def set_costs(*, decode_s: float | None = None, step_s: float | None = None,
              path: Path = CONTROL) -> None:
    """Set the seconds per decoded sample and/or per training step; atomic, so a reader never
    sees half a file. A cost not given keeps its value."""
    costs = {**read_costs(path), **{k: float(v) for k, v in
                                   (("decode_s", decode_s), ("step_s", step_s)) if v is not None}}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(costs))
    tmp.replace(path)


def read_costs(path: Path = CONTROL) -> dict[str, float]:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}


def injected(batch):
    """Sleep the current decode cost per sample (no file: no cost); note the node (``WHERE``)."""
    if WHERE.is_dir() and not (WHERE / str(os.getpid())).exists():
        import ray

        (WHERE / str(os.getpid())).write_text(ray.get_runtime_context().get_node_id())
    cost = read_costs().get("decode_s", 0.0)
    if cost > 0:
        time.sleep(cost * len(batch["id"]))
    return batch


def paced_cnn(*, input_shape, num_classes):
    """The small CNN plus the step cost: at 0.15 s, train.batch_size 16 and two ranks the
    trainers eat about 150 samples/s. Its training forward also sleeps the current step cost
    (validation, in eval mode, runs at the inner model's speed). torch is imported here: the
    decode actors import this module for :func:`injected`, and torch is 1.4 s of CPU each."""
    from torch import nn

    from pipeline.train.models import small_cnn

    class Paced(nn.Module):
        def __init__(self, inner: nn.Module):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            if self.training:
                time.sleep(read_costs().get("step_s", 0.0))
            return self.inner(x)

    return Paced(small_cnn(input_shape=input_shape, num_classes=num_classes))
