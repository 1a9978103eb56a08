"""What the loop's passes take, built without Ray: a WorkerSpec, host batches shaped as Ray
Data's ``iter_batches(batch_format="numpy")`` yields them, and a stand-in for the reporter."""

from types import SimpleNamespace

import numpy as np

from pipeline.config import load_config
from pipeline.train.loop import WorkerSpec, augmenter, train_pass
from pipeline.train.observers import Spans


class Reporter:
    """The shape of the run's inbox actor handle: ``reporter.push.remote(message)``
    (:func:`pipeline.messages.send`); keeps the messages."""

    def __init__(self):
        self.records = []
        self.push = SimpleNamespace(remote=self.records.append)


def spec(task, *, field="features", shape=(4,), num_train=64, augment=False, **train):
    data = {"augment": {"hflip": 0.5, "crop_padding": 2}} if augment else {}
    cfg = load_config({"train": {"epochs": 1, **train}, "data": data})
    return WorkerSpec(config=cfg, field=field, sample_shape=shape, num_classes=3, use_gpu=False,
                      has_val=False, reporter=Reporter(), num_train=num_train, task=task)


def batches(sizes, *, field="features", shape=(4,), seed=0):
    """Host batches as Ray Data's iter_batches(batch_format='numpy') yields them."""
    rng = np.random.default_rng(seed)
    out, start = [], 0
    for n in sizes:
        out.append({field: rng.normal(size=(n, *shape)).astype(np.float32),
                    "label": rng.integers(0, 3, n).astype(np.int64),
                    "id": np.arange(start, start + n, dtype=np.int64)})
        start += n
    return out


def merged(host, groups):
    """The same rows in fewer, bigger batches: ``groups`` lists how many batches each takes."""
    out, i = [], 0
    for k in groups:
        out.append({key: np.concatenate([b[key] for b in host[i:i + k]]) for key in host[0]})
        i += k
    return out


def one_pass(feeder, stepper, prof, worker_spec, epoch=0):
    """The loop's training pass, observed by the profile's spans only."""
    spans = Spans(prof)
    return train_pass(feeder, stepper, spans, spans, epoch=epoch, field=worker_spec.field,
                      transform=augmenter(worker_spec, epoch))
