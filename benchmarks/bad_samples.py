"""Bad samples: throughput with 25 corrupt files in 1,000 vs the same folder clean, in one run.

    python benchmarks/bad_samples.py [--reps 5] [--epochs 3] [--save]   # ~7 min on 2 CPUs

Two copies of one synthetic 256² JPEG folder (``pipeline.data.synthetic``): one clean, one where 25
files spread through the listing (so they share blocks and batches with good ones) are zero
bytes, random bytes or truncated. Both are measured, alternating which goes first:

- ``run``: ``pipeline run`` (2 Train workers, the quickstart CNN); the median of the per-epoch
  samples/s after the first epoch (the first includes actor start-up).
- ``reader``: the preprocessing UDF alone (decode + quarantine, the real quarantine actor, no
  training) over the folder in batches, 5 passes a repetition, alternating folders, measured
  before the runs: the median delivered samples/s; where quarantining costs the most.

The goal is bad ≥ 90% of clean. Prints a Markdown table and JSON; ``--save`` writes both to
``benchmarks/results/bad-samples-<date>.{json,md}``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ab import ROOT, steady_rate  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
QUICKSTART = ROOT / "examples/quickstart.yaml"
COUNT, BAD = 1000, 25
PASSES = 5  # of the reader alone, per repetition


def folders(base: Path) -> dict[str, Path]:
    from pipeline.data.synthetic import corrupt_files, write_synthetic

    clean = write_synthetic(base / "cache", count=COUNT, size=(256, 256), classes=10)
    bad = base / "bad"
    shutil.copytree(clean, bad)
    corrupt_files(sorted(bad.rglob("*.jpg"))[:: COUNT // BAD][:BAD])
    return {"clean": clean, "bad": bad}


def sets(folder: Path, epochs: int) -> list[str]:
    return ["data.source.kind=image_folder", f"data.source.path={folder}",
            "data.val_fraction=0", "data.channels=3", f"train.epochs={epochs}"]


def reader_rates(paths: dict[str, Path], passes: int) -> dict[str, list[float]]:
    """The preprocessing UDF over each folder in batches, in this process, with the real
    quarantine actor: decode and quarantine cost per delivered sample, without the scheduling
    noise of a sub-second Ray Data pass. Passes alternate between the folders."""
    import ray

    from pipeline.config import load_config
    from pipeline.data import SampleReader, plan_source
    from pipeline.data.quarantine import QuarantineLog

    readers = {}
    for kind, folder in paths.items():
        config = load_config(QUICKSTART, sets(folder, 1))
        plan, spec = plan_source(config.data)
        quarantine = QuarantineLog.remote(kind)
        size, manifest = config.data.decode_batch_size, plan.manifest
        batches = [{k: manifest.column(k).to_numpy(zero_copy_only=False)[i:i + size]
                    for k in manifest.column_names} for i in range(0, manifest.num_rows, size)]
        readers[kind] = (SampleReader(replace(spec, ship_uint8=True), quarantine=quarantine),
                         batches, quarantine)
    rates: dict[str, list[float]] = {kind: [] for kind in paths}
    for n in range(passes):
        for kind in list(paths)[:: 1 if n % 2 == 0 else -1]:
            reader, batches, _ = readers[kind]
            start = time.perf_counter()
            rows = sum(len(reader(batch)["id"]) for batch in batches)
            rates[kind].append(rows / (time.perf_counter() - start))
    for kind, (_, _, quarantine) in readers.items():
        assert len(ray.get(quarantine.records.remote())) == (BAD if kind == "bad" else 0)
        ray.kill(quarantine)
    return rates


def table(result: dict) -> str:
    lines = ["| measure | clean (median samples/s) | 25 bad (median samples/s) | bad / clean |",
             "|---|---:|---:|---:|"]
    for name, row in result["summary"].items():
        lines.append(f"| {name} | {row['clean']:,.0f} | {row['bad']:,.0f} | "
                     f"{row['ratio']:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--save", action="store_true")
    args = parser.parse_args(argv)
    import ray

    ray.init(address="local", num_cpus=8, include_dashboard=False, log_to_driver=False)
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="feedline-bad-") as tmp:
        base = Path(tmp)
        paths = folders(base)
        reader = reader_rates(paths, PASSES * args.reps)
        print(json.dumps({"reader": reader}), flush=True)
        for rep in range(args.reps):
            for kind in ("clean", "bad") if rep % 2 == 0 else ("bad", "clean"):
                row = {"rep": rep, "kind": kind, **steady_rate(
                    QUICKSTART, sets(paths[kind], args.epochs), base / f"run-{rep}-{kind}")}
                print(json.dumps(row), flush=True)
                runs.append(row)
    ray.shutdown()
    rates = {"reader": reader,
             "run": {kind: [r["samples_per_s"] for r in runs if r["kind"] == kind]
                     for kind in ("clean", "bad")}}
    summary = {}
    for measure, per_kind in rates.items():
        med = {kind: statistics.median(values) for kind, values in per_kind.items()}
        summary[measure] = med | {"ratio": med["bad"] / med["clean"]}
    result = {"date": time.strftime("%Y-%m-%d"), "count": COUNT, "bad": BAD,
              "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                          "load_avg": os.getloadavg()},
              "summary": summary, "reader_passes": reader, "runs": runs}
    print(table(result))
    if args.save:
        stem = RESULTS / f"bad-samples-{result['date']}"
        stem.with_suffix(".json").write_text(json.dumps(result, indent=2))
        stem.with_suffix(".md").write_text(
            f"# Bad samples vs clean, {result['date']}\n\n`python benchmarks/bad_samples.py "
            f"--save` ({args.reps} interleaved reps, {args.epochs} epochs; {COUNT} JPEGs, "
            f"{BAD} corrupt)\n\n{table(result)}\n\nEvery value, run by run: the .json file.\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
