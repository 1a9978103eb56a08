"""Placement on a simulated multi-node cluster: preprocessing on CPU nodes, training elsewhere."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(600)
def test_each_stage_runs_on_its_own_nodes(tmp_path):
    # Its own process: a driver can join one Ray at a time and the session's Ray is in this one.
    out = subprocess.run([sys.executable, str(ROOT / "tests/integration/multinode_run.py"),
                          str(tmp_path / "run")], capture_output=True, text=True, timeout=560,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("FEEDLINE-RESULT ")]
    report = json.loads(line.removeprefix("FEEDLINE-RESULT "))
    readers = [a for a in report["actors"] if "MapWorker" in a["class"]]
    trainers = [a for a in report["actors"] if a["class"] == "RayTrainWorker"]
    assert len(readers) >= 2 and len(trainers) == 2, report["actors"]
    assert {a["node"] for a in readers} <= set(report["pre_nodes"])
    assert {a["node"] for a in trainers} == {report["train_node"]}
    summary = report["summary"]
    assert summary["status"] == "succeeded"
    assert summary["samples"] == summary["data"]["num_train"]
    assert summary["plan"]["data_cpus"] == 4  # both preprocessing nodes, no training CPUs taken


@pytest.mark.timeout(600)
def test_losing_a_preprocessing_node_mid_epoch_loses_nothing(tmp_path):
    # the kill point, seeded: this long after the node has decoded its first batches
    delay = 0.5 + 2 * random.Random(7).random()
    out = subprocess.run([sys.executable, str(ROOT / "tests/integration/node_loss_run.py"),
                          str(tmp_path / "run"), f"{delay:.1f}"], capture_output=True,
                         text=True, timeout=560, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("FEEDLINE-RESULT ")]
    report = json.loads(line.removeprefix("FEEDLINE-RESULT "))
    assert [e for e, *_ in report["events"]] == ["removed", "added"]
    # the removed node held work when it went: its actors were decoding just before, and no
    # batch of its finished after
    [(_, removing, removed, node)] = [e for e in report["events"] if e[0] == "removed"]
    ours = [(float(start), float(end)) for n, start, end in report["batches"] if n == node]
    assert ours and max(start for start, _ in ours) > removing - 2.0, (ours[-3:], removing)
    assert all(end <= removed + 0.5 for _, end in ours), (ours[-3:], removed)
    assert any(n != node for n, *_ in report["batches"])  # the survivors carried on
    summary = report["summary"]
    assert summary["status"] == "succeeded"
    for epoch in summary["accounting"]:
        assert (epoch["lost"], epoch["duplicated"]) == (0, 0), epoch
        assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]
