"""The ingest benchmark at tiny size on the session's local Ray: every contender delivers every
sample of every epoch once with the same bytes, runs rotate, every run's CPU is measured over
the whole process tree, and an impossible result is reported as INVALID. No timing asserts."""

import argparse
import json
from dataclasses import replace

import numpy as np
import pytest
from PIL import Image
from rich.console import Console

from pipeline.bench import ingest_summary
from pipeline.bench.ingest import IngestBenchConfig, run_ingest_bench, verify_outputs
from pipeline.bench.ingest_report import print_console, to_markdown
from pipeline.cli import bench_ingest
from pipeline.data.synthetic import synthetic_image, write_synthetic

CONTENDERS = ("feedline", "feedline_cache", "ray_data_tuned", "ray_data_defaults",
              "dataloader_tuned", "ceiling")


@pytest.mark.timeout(900)
def test_every_contender_runs_the_same_work_and_impossible_results_are_invalid(ray_cluster,
                                                                                tmp_path):
    import ray

    config = IngestBenchConfig(samples=64, source_size=(32, 32), image_size=(16, 16),
                               batch_size=16, reps=1, epochs=(1, 2), workers=2,
                               cache_dir=str(tmp_path), settle_s=0.0)  # no timing judged
    result = run_ingest_bench(config)

    assert ray.is_initialized(), "the benchmark must not stop a Ray it did not start"
    assert result["ray_started_by_benchmark"] is False
    assert result["workload"]["output"] == "uint8 3x16x16"
    runs = result["runs"]
    assert [(r["contender"], r["epochs"]) for r in runs] == [
        (name, epochs) for name in CONTENDERS for epochs in (1, 2)]
    for run in runs + result["warmup"]:
        assert run["samples"] == 64 * run["epochs"], run
        assert [d["samples"] for d in run["epoch_detail"]] == [64] * run["epochs"]
        # the session's Ray was started by this process: its workers' CPU is in the tree
        assert run["cpu_visible"] and run["cpu_s"] > 0 and run["e2e_sps"] > 0
        assert (run["ttfb_later_s"] is None) == (run["epochs"] == 1)
    # the cache row records in epoch 1 and replays every later epoch, from memory (auto)
    cached = [(r["epochs"], r["decided"]) for r in runs if r["contender"] == "feedline_cache"]
    assert cached and all(d["mode"] == "memory" and d["replays"] == epochs - 1
                          for epochs, d in cached)
    assert set(result["verdicts"]) == set(CONTENDERS)
    json.dumps(result)  # the --json output is plain data

    # The same runs with Feedline's throughput inflated 1000x: physically impossible.
    forged = [dict(r, e2e_sps=r["e2e_sps"] * 1000) if r["contender"] == "feedline" else r
              for r in runs]
    result["verdicts"] = ingest_summary.verdicts(forged, CONTENDERS, cores=2)
    result["ratios"] = ingest_summary.ratios(result["summary"], result["verdicts"])
    result["targets"] = ingest_summary.targets(result["summary"], result["ratios"])
    assert not result["verdicts"]["feedline"]["valid"]
    assert set(result["ratios"]["feedline"].values()) == {"INVALID"}
    report = to_markdown(result)
    assert "Feedline INVALID: 1 epoch: 1 of 1 runs" in report
    for label in ("Feedline (cache)", "raw Ray Data tuned", "raw Ray Data (defaults)",
                  "DataLoader tuned", "ceiling", "nproc", "ray 2.", "idle baseline"):
        assert label in report
    console = Console(record=True, width=120)
    print_console(result, console)
    assert "INVALID" in console.export_text()


def test_verification_rejects_different_bytes_or_ids():
    good = [{0: 11, 1: 22}, {0: 11, 1: 22}]
    verify_outputs({"ceiling": good, "feedline": [dict(e) for e in good]}, {0, 1})
    with pytest.raises(RuntimeError, match="feedline decoded 1 samples of epoch 2 differently"):
        verify_outputs({"ceiling": good, "feedline": [good[0], {0: 11, 1: 23}]}, {0, 1})
    with pytest.raises(RuntimeError, match="dataloader_tuned delivered a different set"):
        verify_outputs({"ceiling": good, "dataloader_tuned": [{0: 11}]}, {0, 1})


def test_synthetic_images_are_a_pure_function_of_the_id(tmp_path):
    root = write_synthetic(tmp_path / "a", count=6, size=(16, 20), fmt="png", classes=3)
    again = write_synthetic(tmp_path / "b", count=6, size=(16, 20), fmt="png", classes=3)
    files = sorted(p.relative_to(root) for p in root.rglob("*.png"))
    assert [str(f) for f in files] == [f"class_{i // 2:02d}/{i:07d}.png" for i in range(6)]
    for f in files:
        assert (root / f).read_bytes() == (again / f).read_bytes()
    decoded = np.asarray(Image.open(root / files[4]))
    np.testing.assert_array_equal(decoded, synthetic_image(4, (16, 20)))
    assert not np.array_equal(synthetic_image(4, (16, 20)), synthetic_image(5, (16, 20)))


def test_cli_flags_select_the_config():
    parser = argparse.ArgumentParser()
    bench_ingest.configure(parser)
    quick = bench_ingest.bench_config(parser.parse_args(["--quick", "--workers", "3"]))
    assert (quick.samples, quick.reps, quick.workers, quick.image_size) == (128, 1, 3, (32, 32))
    full = bench_ingest.bench_config(parser.parse_args(["--samples", "1000"]))
    assert (full.samples, full.reps, full.epochs, full.resolved_workers() >= 1) == \
        (1000, 5, (1, 3), True)
    assert replace(full, contenders=("nope",)).check()
    with pytest.raises(ValueError, match="--reps"):
        bench_ingest.bench_config(parser.parse_args(["--reps", "0"]))
