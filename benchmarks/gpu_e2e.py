"""The GPU end-to-end check (issue 27): ``pipeline run`` on a real GPU beside the scripts it
replaces, the diagnosis on injected GPU bottlenecks, and the transfer and profiler benchmarks.

Run by ``benchmarks/gpu_e2e.sh`` on the device machine (Ray from the device bundle), or with
``--dry`` anywhere: the same steps on the CPU at a tiny size (a test runs it so, so the script
cannot rot between device sessions). Steps, each under its own timeout:

===========  =================================================================================
env          torch, CUDA, the GPU (nvidia-smi -L), cores
train        the image job of benchmarks/configs/gpu_e2e.yaml (synthetic JPEGs decoded and
             resized, ResNet-18 in bf16, channels-last, 1 Train worker on the GPU, decode actors
             on the other cores), three contenders as whole processes, rotated:
             ``pipeline run``, the hand-written Ray Train + Ray Data script and a tuned DataLoader
             DDP script (pipeline/bench/train.py); NVML utilisation sampled beside each; Feedline's
             own data wait, exposed H2D, GPU-busy share of its steps and verdict
diagnosis    three ``pipeline run`` with one bottleneck injected each: too few decode actors and
             no cache (input), a heavy model on cached data (compute), float32 batches from
             pageable memory with a tiny model (transfer); whether each verdict names it
             (--dry runs the first only)
h2d          benchmarks/h2d.py: raw copy bandwidth and the overlap beside compute
profile      benchmarks/profile_overhead.py: the profiler's cost per step
===========  =================================================================================

Writes ``OUT/gpu-e2e.json`` (everything) and ``OUT/gpu-e2e.md`` (the tables).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "benchmarks" / "configs" / "gpu_e2e.yaml"

#: the job's size on the GPU machine (16 cores, one H100/H200) and for --dry (2 cores, no GPU)
SIZES = {
    "gpu": {"samples": 4096, "source": (256, 256), "epochs": 3, "timeout_s": 150,
            "sets": []},
    "dry": {"samples": 64, "source": (48, 48), "epochs": 1, "timeout_s": 240,
            # one step over the 64 images: every contender's loss is the same model's on the
            # same data (tests/integration/test_gpu_e2e_dry.py checks it)
            "sets": ["data.image_size=[32, 32]", "train.model=cnn", "train.precision=fp32",
                     "train.batch_size=64", "train.cpus_per_worker=0.5",
                     "data.concurrency=[1, 1]"],
            # each run's start-up dominates anyway; steps enough for the profile's windows
            "diagnosis_sets": ["train.epochs=1", "train.batch_size=16"],
            "diagnosis": ["input_bound"]},  # one injected run shows the step works
}
#: what each diagnosis run injects, the verdict that names it, and its overrides
INJECTED = {
    "input_bound": ["data.concurrency=[1, 1]", "data.cache=off", "train.epochs=2"],
    "compute_bound": ["data.cache=memory", "train.epochs=3", "train.batch_size=256"],
    "transfer_bound": ["data.cache=memory", "train.epochs=3", "train.model=cnn",
                      "transfer.ship_uint8=false", "transfer.pin_memory=false",
                      "train.batch_size=512"],
}


class GpuSampler:
    """NVML utilisation of GPU 0 every 0.1 s in a thread, with times (no-op without NVML)."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error = ""

    def __enter__(self) -> GpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception as exc:  # noqa: BLE001 - no NVML (CPU, --dry): said in the results
            self.error = f"{type(exc).__name__}: {exc}"
            return
        while not self._stop.wait(0.1):
            util = pynvml.nvmlDeviceGetUtilizationRates(handle).gpu
            self.samples.append((time.time(), int(util)))

    def between(self, start: float, end: float) -> dict[str, float] | None:
        values = [u for t, u in self.samples if start <= t <= end]
        if not values:
            return None
        return {"median": statistics.median(values), "mean": statistics.fmean(values),
                "samples": len(values)}


def env() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.cuda.is_available(),
                           "cores": os.cpu_count(), "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
        out["nvidia_smi"] = smi.stdout.strip()
    return out


def feedline_facts(run_dir: Path) -> dict[str, Any]:
    """What Feedline's own summary says of a run: throughput, waits, GPU busy, verdict."""
    path = run_dir / "summary.json"
    if not path.is_file():
        return {"error": f"no summary.json in {run_dir}"}
    s = json.loads(path.read_text())
    steps = s.get("step_breakdown") or {}
    total = sum(v for v in steps.values() if isinstance(v, (int, float))) or 0.0
    busy = sum(steps.get(k, 0.0) for k in ("forward", "backward", "optimizer", "comm_exposed"))
    return {"status": s.get("status"), "wall_s": s.get("wall_seconds"),
            "samples_per_second": s.get("samples_per_second"),
            "steady_samples_per_second": s.get("steady_samples_per_second"),
            "data_wait_fraction": s.get("data_wait_fraction"),
            "h2d_share_of_steps": steps.get("h2d", 0.0) / total if total else None,
            # CUDA-event spans of the device work, over the steps' time (steady training)
            "gpu_busy_share_of_steps": busy / total if total else None,
            "verdict": (s.get("diagnosis") or {}).get("verdict"),
            "advice": (s.get("diagnosis") or {}).get("advice"), "train_loss": s.get("train_loss")}


def train_step(size: dict[str, Any], device: str, work: Path, sampler: GpuSampler,
               data: Path) -> dict[str, Any]:
    from pipeline.bench.train import TrainBenchConfig, run_train_bench

    marks: list[tuple[str, float]] = []
    bench = TrainBenchConfig(config=str(CONFIG), samples=size["samples"],
                             source_size=size["source"], epochs=size["epochs"], rounds=1,
                             cache_dir=str(data), work_dir=str(work), device=device,
                             timeout_s=size["timeout_s"])
    if size["sets"]:  # the tiny size: a config of its own, the job's file with the overrides
        bench = _with_sets(bench, size["sets"], work)
    result = run_train_bench(bench, progress=lambda msg: marks.append((msg, time.time())))
    starts = [t for msg, t in marks if msg.startswith("round")]
    ends = [t for msg, t in marks if msg.startswith("  ")]
    rows = []
    for run, start, end in zip(result["runs"], starts, ends, strict=False):
        row = {"contender": run["contender"], "ok": run["ok"], "wall_s": run["wall_s"],
               "samples": run["samples"], "train_loss": run["train_loss"],
               "samples_per_second": (run["samples"] / run["wall_s"]
                                      if run["samples"] and run["wall_s"] else None),
               "nvml_util": sampler.between(start, end)}
        if run["contender"] == "feedline":
            row["feedline"] = feedline_facts(work / f"r{run['round']}-feedline")
        rows.append(row)
    return {"rows": rows, "ratios": result.get("ratios"), "commands": result.get("commands"),
            "bench": result}


def _with_sets(bench: Any, sets: list[str], work: Path) -> Any:
    """``bench`` on a copy of its config with ``sets`` applied (the baselines read the file)."""
    from dataclasses import replace

    import yaml

    from pipeline.config import load_config, to_dict

    work.mkdir(parents=True, exist_ok=True)
    path = work / "gpu_e2e.yaml"
    path.write_text(yaml.safe_dump(to_dict(load_config(bench.config, sets)), sort_keys=False))
    return replace(bench, config=str(path))


def diagnosis_step(size: dict[str, Any], data: Path, work: Path) -> dict[str, Any]:
    out = {}
    for expected in size.get("diagnosis", INJECTED):
        sets = INJECTED[expected]
        run_dir = work / f"diagnosis-{expected}"
        argv = [sys.executable, "-m", "pipeline", "run", str(CONFIG), "--output", str(run_dir),
                "--set", f"data.source.path={data}"]
        for item in [*size["sets"], *sets, *size.get("diagnosis_sets", [])]:
            argv += ["--set", item]
        started = time.time()
        done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True,
                              timeout=size["timeout_s"])
        facts = feedline_facts(run_dir)
        out[expected] = {"rc": done.returncode, "seconds": time.time() - started, **facts,
                         "named": facts.get("verdict") == expected,
                         "log_tail": "" if done.returncode == 0 else done.stdout[-2000:]}
    return out


def script_step(script: str, args: list[str], work: Path, timeout_s: float) -> dict[str, Any]:
    out = work / f"{Path(script).stem}.json"
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / script), *args, "--json",
                           str(out)], cwd=REPO, capture_output=True, text=True,
                          timeout=timeout_s)
    if done.returncode != 0 or not out.is_file():
        return {"rc": done.returncode, "error": done.stderr[-2000:]}
    return json.loads(out.read_text())


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# GPU end-to-end check ({'dry run on CPU' if result['dry'] else 'GPU'})", "",
             f"Environment: `{json.dumps(result['env'])}`", "",
             "## The image job, three contenders (whole processes)", "",
             "| contender | ok | wall (s) | samples/s | NVML util median (%) | loss |",
             "|---|---|---|---|---|---|"]
    for r in result["train"].get("rows", []):
        util = (r.get("nvml_util") or {}).get("median")
        lines.append(f"| {r['contender']} | {r['ok']} | {r['wall_s']:.1f} | "
                     f"{_num(r.get('samples_per_second'))} | {_num(util)} | "
                     f"{_num(r.get('train_loss'))} |")
    feed = next((r["feedline"] for r in result["train"].get("rows", []) if "feedline" in r), {})
    lines += ["", f"Feedline's own view: data wait {_num(feed.get('data_wait_fraction'))}, "
                  f"exposed H2D {_num(feed.get('h2d_share_of_steps'))} and GPU-busy "
                  f"{_num(feed.get('gpu_busy_share_of_steps'))} of its steps, verdict "
                  f"`{feed.get('verdict')}`.", "", "## Injected bottlenecks", "",
              "| injected | verdict | named | wall (s) |", "|---|---|---|---|"]
    for expected, d in result["diagnosis"].items():
        lines.append(f"| {expected} | {d.get('verdict')} | {d.get('named')} | "
                     f"{_num(d.get('wall_s'))} |")
    lines += ["", f"Steps and seconds: `{json.dumps(result['seconds'])}`; errors: "
                  f"`{json.dumps(result['errors'])}`", ""]
    return "\n".join(lines)


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, (int, float)) else "–"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="results folder")
    parser.add_argument("--dry", action="store_true", help="CPU, tiny size: the script's check")
    parser.add_argument("--steps", default="env,train,diagnosis,h2d,profile")
    args = parser.parse_args(argv)
    size, device = SIZES["dry" if args.dry else "gpu"], "cpu" if args.dry else "cuda"
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(os.environ.get("GPU_E2E_WORK", "/tmp/feedline-gpu-e2e"))
    data = work / "data"
    result: dict[str, Any] = {"dry": args.dry, "size": size, "env": {}, "train": {},
                              "diagnosis": {}, "h2d": {}, "profile": {}, "seconds": {},
                              "errors": {}}
    quick = ["--quick", "--device", device] + (["--trials", "1", "--parts", "bandwidth"]
                                               if args.dry else [])
    steps = {
        "env": env,
        "train": lambda: train_step(size, device, work / "train", sampler, data),
        "diagnosis": lambda: diagnosis_step(size, _images(data, size), work),
        "h2d": lambda: script_step("h2d.py", quick if args.dry else ["--device", device],
                                   work, 300),
        "profile": lambda: script_step(
            "profile_overhead.py", ["--parts", "single", "--device", device]
            + (["--quick", "--steps", "5", "--reps", "2"] if args.dry else []), work, 300),
    }
    with GpuSampler() as sampler:
        for name in args.steps.split(","):
            started = time.time()
            print(f"gpu_e2e: {name} ...", flush=True)
            try:
                result[name] = steps[name]()
            except Exception as exc:  # noqa: BLE001 - one step's failure is reported, not fatal
                result["errors"][name] = f"{type(exc).__name__}: {exc}"
            result["seconds"][name] = round(time.time() - started, 1)
            (args.out / "gpu-e2e.json").write_text(json.dumps(result, indent=1, default=str))
    result["nvml"] = sampler.error or f"{len(sampler.samples)} samples"
    (args.out / "gpu-e2e.json").write_text(json.dumps(result, indent=1, default=str))
    (args.out / "gpu-e2e.md").write_text(markdown(result))
    print(markdown(result), flush=True)
    return 1 if result["errors"] else 0


def _images(data: Path, size: dict[str, Any]) -> Path:
    """The folder of synthetic JPEGs the train step wrote (written here if it did not run)."""
    from pipeline.data.synthetic import write_synthetic

    return write_synthetic(data, count=size["samples"], size=size["source"], fmt="jpeg",
                           classes=10)


if __name__ == "__main__":
    sys.exit(main())
