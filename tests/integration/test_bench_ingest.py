"""The ingest benchmark at tiny size on the session's local Ray: every contender delivers every
sample once with the same pixels, in both regimes, and the report says so. No timing asserts."""

import argparse
import json

import numpy as np
import pytest
from PIL import Image

from pipeline.cli import bench_ingest
from pipeline.data.ingest_bench import IngestBenchConfig, _verify, run_ingest_bench
from pipeline.data.ingest_report import to_markdown
from pipeline.data.synthetic import synthetic_image, write_synthetic

CONTENDERS = ("feedline", "raw_ray_data", "dataloader", "ceiling")


@pytest.mark.timeout(240)
def test_every_contender_delivers_every_sample_in_both_regimes(ray_cluster, tmp_path):
    import ray

    config = IngestBenchConfig(samples=48, source_size=(24, 24), image_size=(16, 16),
                               batch_size=16, reps=1, workers=2, cache_dir=str(tmp_path))
    result = run_ingest_bench(config)

    assert ray.is_initialized(), "the benchmark must not stop a Ray it did not start"
    assert result["ray_started_by_benchmark"] is False
    runs = result["runs"]
    assert [(r["regime"], r["contender"]) for r in runs] == [
        (regime, name) for regime in ("data_bound", "compute_bound") for name in CONTENDERS]
    for run in runs + result["warmup"]:
        assert run["samples"] == 48 and run["batches"] == 3, run
        assert run["steady_sps"] > 0 and 0 <= run["stall_fraction"] <= 1
        assert run["peak_pss_mb"] > 0 and run["store_peak_mb"] is not None
    assert result["compute_step_s"] > 0
    assert {t["target"] for t in result["targets"]} >= {
        "data-bound throughput >= 1.10x raw Ray Data", "compute-bound stall fraction <= 2%"}
    json.dumps(result)  # the --json output is plain data
    report = to_markdown(result)
    for label in ("Feedline", "raw Ray Data", "DataLoader", "ceiling", "nproc", "ray 2."):
        assert label in report


def test_verification_rejects_a_contender_that_decodes_differently():
    good = {0: 1.0, 1: 2.0}
    _verify({"ceiling": good, "feedline": dict(good)}, {0, 1})
    with pytest.raises(RuntimeError, match="feedline decoded sample 1 differently"):
        _verify({"ceiling": good, "feedline": {0: 1.0, 1: 2.5}}, {0, 1})
    with pytest.raises(RuntimeError, match="dataloader delivered a different set"):
        _verify({"ceiling": good, "dataloader": {0: 1.0}}, {0, 1})


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
    assert (quick.samples, quick.reps, quick.workers, quick.image_size) == (256, 1, 3, (32, 32))
    full = bench_ingest.bench_config(parser.parse_args(["--samples", "1000"]))
    assert (full.samples, full.reps, full.resolved_workers() >= 1) == (1000, 5, True)
    with pytest.raises(ValueError, match="--reps"):
        bench_ingest.bench_config(parser.parse_args(["--reps", "0"]))
