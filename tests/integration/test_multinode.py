"""Placement on a simulated multi-node cluster: preprocessing on CPU nodes, training elsewhere."""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.config import load_config
from pipeline.pool.controller import WINDOW_S
from pipeline.pool.policy import GROW_WAIT

ROOT = Path(__file__).resolve().parents[2]
COOLDOWN_S = load_config({}).data.autoscale_cooldown_s  # multinode_run.py keeps the default


@pytest.fixture(scope="module")
def multinode(tmp_path_factory):
    """One job on a simulated multi-node cluster (multinode_run.py), shared by the tests below.
    Its own process: a driver can join one Ray at a time and the session's Ray is in this one."""
    run_dir = tmp_path_factory.mktemp("multinode") / "run"
    out = subprocess.run([sys.executable, str(ROOT / "tests/integration/multinode_run.py"),
                          str(run_dir)], capture_output=True, text=True, timeout=560, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-4000:]
    [line] = [x for x in out.stdout.splitlines() if x.startswith("FEEDLINE-RESULT ")]
    return json.loads(line.removeprefix("FEEDLINE-RESULT ")) | {"run_dir": run_dir}


@pytest.mark.timeout(600)
def test_each_stage_runs_on_its_own_nodes(multinode):
    report = multinode
    decoders = report["decoders"]  # decoding process → its node
    trainers = [a for a in report["actors"] if a["class"] == "RayTrainWorker"]
    assert len(decoders) >= 2 and len(trainers) == 2, (decoders, report["actors"])
    assert set(decoders.values()) <= set(report["pre_nodes"])
    assert {a["node"] for a in trainers} == {report["train_node"]}
    summary = report["summary"]
    assert summary["status"] == "succeeded" and summary["exactly_once"]
    accounting = summary["accounting"]
    assert [a["epoch"] for a in accounting] == [1, 2, 3, 4]
    for epoch in accounting:  # every row but the equal split's remainder, once an epoch
        assert epoch["unique"] + len(epoch["split_remainder"]) == summary["data"]["num_train"]
    assert summary["samples"] == sum(a["unique"] for a in accounting)
    assert summary["plan"]["data_cpus"] == 4  # both preprocessing nodes, no training CPUs taken


@pytest.mark.timeout(600)
def test_the_decode_pool_follows_the_trainers_wait(multinode):
    pool = multinode["summary"]["autoscale"]
    decisions, samples = pool["decisions"], pool["samples"]
    # starved (one actor feeds under a third of the demand): the pool grows from the minimum
    grow = decisions[0]
    assert (grow["action"], grow["size_before"]) == ("grow", 1) and grow["size_after"] >= 3
    assert grow["wait_before"] > 0.5, grow
    # ... until the trainers stop waiting (below the threshold it grows at), judged as the
    # controller judges: its windows after its last growth in which something decodes, up to
    # when the model got heavier, a whole epoch later. Not an epoch's total: a streamed epoch's
    # first blocks alone made 10% of one on a slow CI day at a pool that fed every window. Its
    # last two windows: under load the new processes come up after the cooldown and the wait
    # falls as they do (two CI runs: 41%, 27%, 25%, 6%, 3%; 48%, 28%, 39%, 13%, 7%). A pool
    # that never feeds stays at its starved wait in every window.
    heavier = multinode["heavier_at"]
    assert heavier is not None
    last_grow = max(d["t"] for d in decisions if d["action"] == "grow" and d["t"] < heavier)
    assert [e for e in pool["epochs"] if last_grow < e["start"] and e["end"] < heavier]
    fed = [s["wait"] for s in samples
           if last_grow + COOLDOWN_S < s["t"] < heavier and s["steps"] and s["actors"]]
    assert len(fed) >= 2 and min(fed[-2:]) < GROW_WAIT, (fed, pool["epochs"])
    # heavier steps: the trainers never wait, the actors idle, the pool shrinks back
    shrinks = [d for d in decisions if d["action"] == "shrink" and d["t"] > heavier]
    assert shrinks, decisions
    assert shrinks[0]["size_after"] < max(d["size_after"] for d in decisions)
    assert shrinks[0]["wait_before"] < 0.02 and shrinks[0]["busy_before"] < 0.5
    # what decodes after it runs within the smaller pool: tasks at once, on average over each
    # window (a process reports up to a second of its decoding late: one task of slack)
    after = [s for s in samples if s["t"] > shrinks[-1]["t"] + WINDOW_S]
    assert all(s["decoding"] <= shrinks[-1]["size_after"] + 1 for s in after), after
    # every decision is visible: metrics.jsonl, the report and the timeline
    run_dir = multinode["run_dir"]
    records = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r for r in records if r.get("type") == "pool"] == decisions
    assert "## Decode pool (data.autoscale)" in (run_dir / "report.md").read_text()
    trace = json.loads((run_dir / "timeline.json").read_text())["traceEvents"]
    assert any(e["ph"] == "C" and e["name"] == "decode actors" for e in trace)
    assert sum(e["ph"] == "i" for e in trace) == len(decisions)


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
