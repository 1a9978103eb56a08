"""The collective stage on a local Ray: doctor on every node, the bench over 2 gloo actors."""

import argparse
import json

import pytest

from pipeline.cli import bench_collective, doctor


def _args(module, argv):
    parser = argparse.ArgumentParser()
    module.configure(parser)
    return parser.parse_args(argv)


@pytest.mark.timeout(120)
def test_doctor_reports_every_alive_node(ray_cluster, capsys):
    import ray

    assert doctor.main(_args(doctor, ["--address", ray_cluster, "--json"])) == 0
    nodes = json.loads(capsys.readouterr().out)["nodes"]
    alive = [n for n in ray.nodes() if n["Alive"]]
    assert len(nodes) == len(alive)
    for node in nodes:
        assert set(node) == {"hostname", "topology", "rails", "nccl_env", "rank_plans",
                             "warnings", "notes"}
        # no GPU here: no GPU to pair with a NIC, so no per-rank plan
        assert node["rank_plans"] == [] and node["rails"]["pairs"] == []
        assert node["topology"]["network"] in ("ethernet", "loopback", "infiniband", "roce")
        assert "NCCL_SOCKET_IFNAME" in node["nccl_env"] or node["warnings"]
    assert ray.is_initialized()  # doctor used the caller's Ray and left it running


@pytest.mark.timeout(300)
def test_bench_all_reduces_correctly_over_two_gloo_actors(ray_cluster, tmp_path, capsys):
    out = tmp_path / "bench.json"
    argv = ["--workers", "2", "--backend", "gloo", "--max-size", "4096", "--json", str(out)]
    assert bench_collective.main(_args(bench_collective, argv)) == 0
    report = json.loads(out.read_text())
    assert report["backend"] == "gloo" and report["workers"] == 2
    rows = report["rows"]
    assert {(r["op"], r["size_bytes"]) for r in rows} == {
        (op, size) for op in ("all_reduce", "all_gather", "reduce_scatter")
        for size in (1024, 4096)}
    assert all(r["correct"] for r in rows)
    assert all(r["raw_busbw_GBps"] > 0 for r in rows if r["op"] == "all_reduce")
    printed = capsys.readouterr().out
    assert "raw torch.distributed" in printed and "Feedline busbw" in printed
