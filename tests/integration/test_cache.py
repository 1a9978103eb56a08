"""The decoded-sample cache in a real multi-epoch run: decode once, deliver exactly once."""

import json
import shutil

import numpy as np
import pytest

from tests.integration.cache_transforms import DECODED
from tests.integration.test_reliability import image_folder, run_folder

GOOD, BAD, EPOCHS = 294, 6, 3


def decoded() -> tuple[int, int]:
    """(rows decoded, distinct decoding processes) since the last reset."""
    files = list(DECODED.iterdir()) if DECODED.exists() else []
    return sum(int(n) for f in files for n in f.read_text().split()), len(files)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return image_folder(tmp_path_factory.mktemp("imgs"), good=GOOD, bad=BAD)


@pytest.mark.timeout(400)
@pytest.mark.parametrize("cache", ["memory", "off"])
def test_cache_decodes_once_and_delivers_every_epoch_exactly_once(ray_cluster, folder, tmp_path,
                                                                  cache):
    shutil.rmtree(DECODED, ignore_errors=True)
    summary = run_folder(folder, tmp_path / "out", f"data.cache={cache}",
                         f"train.epochs={EPOCHS}", "data.val_fraction=0.2",
                         "data.transform=tests.integration.cache_transforms:count_rows").summary
    rows, processes = decoded()
    passes = 1 if cache == "memory" else EPOCHS
    # train + validation rows, once per pass: the cache never decodes again after epoch 1
    assert rows == GOOD * passes, (rows, processes)
    # one decoding process for the training set (one task at a time), the same one every
    # streamed epoch: Ray Data's tasks run in the processes Ray keeps (an actor pool started
    # anew every epoch); each rank reads its share of the validation set itself
    assert processes == 1 + 2
    assert summary["cache"]["mode"] == cache
    assert summary["cache"]["replays"] == (EPOCHS - 1 if cache == "memory" else 0)
    records = [json.loads(x) for x in (tmp_path / "out/quarantine.jsonl").read_text().splitlines()]
    assert len({r["id"] for r in records}) == BAD == summary["bad_samples"]
    assert len(summary["accounting"]) == EPOCHS
    train_bad = summary["accounting"][0]["quarantined"]  # the bad files of the training split
    for epoch in summary["accounting"]:
        assert (epoch["lost"], epoch["duplicated"], epoch["quarantined"]) == (0, 0, train_bad)
        assert (epoch["unique"] + len(epoch["split_remainder"]) + train_bad
                == summary["data"]["num_train"])
    assert summary["exactly_once"] is True
    # every epoch a fresh permutation across the ranks, as DistributedSampler deals: a rank
    # trains about half of the rows it trained the epoch before (it used to be all of them,
    # in the same order)
    delivered = np.load(tmp_path / "out/delivered.npz")
    for epoch in range(2, EPOCHS + 1):
        before, now = delivered[f"e{epoch - 1}_rank0"], delivered[f"e{epoch}_rank0"]
        kept = len(np.intersect1d(before, now)) / len(now)
        assert 0.25 < kept < 0.75, (epoch, kept)
    if cache == "memory":
        assert summary["cache"]["reshuffle"].startswith("data.reshuffle: global: every rank")
    first = [m["first_batch_seconds"] for m in map(json.loads, (tmp_path / "out/metrics.jsonl")
                                                   .read_text().splitlines())]
    assert len(first) == EPOCHS
