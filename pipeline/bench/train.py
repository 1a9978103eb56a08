"""The training-job benchmark behind ``pipeline bench train`` (driver side, no Ray in-process).

Issue 13 asks what a user waits for: the whole training job, from process start to exit, on the
same data, model, epochs, batch size, training processes and CPU budget. Three contenders, each
run as its own process and timed from spawn to exit by this harness:

=========  ==================================================================================
feedline   ``pipeline run benchmarks/configs/train_job.yaml`` (its own local Ray)
raytrain   ``benchmarks/train_raytrain.py``: Ray Train + Ray Data written from Ray's docs
ddp        ``benchmarks/train_ddp.py``: plain torch DDP over gloo + DataLoader
=========  ==================================================================================

The YAML is the single source of the numbers the contenders share (batch size, lr, seed, Train
workers, CPUs per worker, image size, mean/std); the baselines get them as flags. Every
contender decodes the same JPEGs (PIL, RGB, bilinear resize, uint8, normalised in the training
process), trains the same CNN with SGD (momentum 0.9), checkpoints every epoch and validates on
nothing. The order of contenders rotates every round; the report gives medians with min-max,
Feedline's speed ratio to each baseline (baseline seconds ÷ Feedline seconds) and each one's
final train loss, so a reader can see that they did the same training.
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"
DEFAULT_CONFIG = BENCHMARKS / "configs" / "train_job.yaml"
RESULT_PREFIX = "BENCH_RESULT "
T0_ENV = "FEEDLINE_BENCH_T0"  # spawn time (time.time()) handed to the baselines for their marks

CONTENDERS = ("feedline", "raytrain", "ddp")
LABELS = {"feedline": "Feedline (pipeline run)",
          "raytrain": "Ray Train + Ray Data (hand-written)",
          "ddp": "torch DDP + DataLoader"}


@dataclass(frozen=True, kw_only=True)
class TrainBenchConfig:
    """What the benchmark runs; everything the contenders share beyond this is in ``config``."""

    config: str = str(DEFAULT_CONFIG)
    samples: int = 2048
    source_size: tuple[int, int] = (256, 256)
    image_size: tuple[int, int] | None = None  # None: the YAML's data.image_size
    classes: int = 10
    epochs: int = 3
    rounds: int = 3
    cpus: int = 0  # 0: this machine's core count
    cache_dir: str = "~/.cache/feedline/bench-train"
    work_dir: str = ""  # run folders and logs; empty: a new temporary folder
    timeout_s: float = 1800.0
    contenders: tuple[str, ...] = CONTENDERS
    device: str = "cpu"  # cuda: Feedline's train.use_gpu, the baselines' --device cuda

    def resolved_cpus(self) -> int:
        return self.cpus or os.cpu_count() or 1

    def check(self) -> list[str]:
        errors = []
        for name in ("samples", "epochs", "rounds", "classes"):
            if getattr(self, name) < 1:
                errors.append(f"{name} ({getattr(self, name)}) must be >= 1")
        if self.cpus < 0:
            errors.append(f"cpus ({self.cpus}) must be >= 0; 0 uses every core")
        if self.device not in ("cpu", "cuda"):
            errors.append(f"device ({self.device!r}) must be cpu or cuda")
        unknown = set(self.contenders) - set(CONTENDERS)
        if unknown or not self.contenders:
            errors.append(f"contenders ({list(self.contenders)}) must be some of {CONTENDERS}")
        if not Path(self.config).is_file():
            errors.append(f"config ({self.config}) not found: the training-job benchmark runs "
                          f"from a source checkout (benchmarks/ beside pipeline/)")
        return errors


@dataclass(frozen=True)
class Job:
    """The numbers every contender shares, read from the YAML (plus the benchmark's overrides)."""

    data: str
    epochs: int
    batch_size: int
    lr: float
    seed: int
    workers: int
    cpus_per_worker: float
    image_size: tuple[int, int]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    cpus: int
    loader_workers: int  # DataLoader processes per DDP rank
    model: str = "cnn"
    precision: str = "fp32"
    device: str = "cpu"

    def baseline_flags(self) -> list[str]:
        return ["--data", self.data, "--epochs", str(self.epochs),
                "--batch-size", str(self.batch_size), "--lr", str(self.lr),
                "--seed", str(self.seed), "--workers", str(self.workers),
                "--image-size", *map(str, self.image_size),
                "--mean", *map(str, self.mean), "--std", *map(str, self.std),
                "--model", self.model, "--precision", self.precision, "--device", self.device]


def feedline_overrides(bench: TrainBenchConfig, data: Path) -> list[str]:
    """The ``--set`` overrides the benchmark gives ``pipeline run`` (shown in the report)."""
    sets = [f"data.source.path={data}", f"train.epochs={bench.epochs}",
            f"run.num_cpus={bench.resolved_cpus()}"]
    if bench.image_size is not None:
        sets.append(f"data.image_size=[{bench.image_size[0]}, {bench.image_size[1]}]")
    if bench.device == "cuda":
        sets.append("train.use_gpu=true")
    return sets


def load_job(bench: TrainBenchConfig, data: Path) -> Job:
    from pipeline.config import load_config

    cfg = load_config(bench.config, feedline_overrides(bench, data))
    if (cfg.data.channels != 3 or cfg.train.model not in ("cnn", "resnet18")
            or cfg.data.val_fraction):
        raise ValueError(f"{bench.config}: the baselines train the built-in cnn or resnet18 on "
                         f"RGB images without validation; keep data.channels 3, train.model "
                         f"cnn or resnet18 and data.val_fraction 0")
    mean, std = cfg.data.channel_stats()
    cpus, workers = bench.resolved_cpus(), cfg.train.num_workers
    return Job(data=str(data), epochs=cfg.train.epochs, batch_size=cfg.train.batch_size,
               lr=cfg.train.lr, seed=cfg.train.seed, workers=workers,
               cpus_per_worker=cfg.train.cpus_per_worker, image_size=cfg.data.image_size,
               mean=mean, std=std, cpus=cpus,
               # an expert leaves each rank a core for its own step: 1 per rank on 2 cores
               loader_workers=max(1, cpus // workers - 1), model=cfg.train.model,
               precision=cfg.train.precision, device=bench.device)


def command(name: str, bench: TrainBenchConfig, job: Job, out: Path) -> list[str]:
    """The argv of one contender; ``out`` is its run folder."""
    if name == "feedline":
        sets = [arg for s in feedline_overrides(bench, Path(job.data)) for arg in ("--set", s)]
        return [sys.executable, "-m", "pipeline", "run", bench.config, "--output", str(out),
                *sets]
    if name == "raytrain":
        return [sys.executable, str(BENCHMARKS / "train_raytrain.py"), *job.baseline_flags(),
                "--cpus-per-worker", str(job.cpus_per_worker), "--num-cpus", str(job.cpus),
                "--output", str(out)]
    if name == "ddp":
        return [sys.executable, str(BENCHMARKS / "train_ddp.py"), *job.baseline_flags(),
                "--loader-workers", str(job.loader_workers), "--output", str(out)]
    raise ValueError(f"unknown contender {name!r}; choose from {CONTENDERS}")


def rotation(names: Sequence[str], round_index: int) -> list[str]:
    """Round r starts with the r-th contender, so each one goes first as often as the others."""
    shift = round_index % len(names)
    return [*names[shift:], *names[:shift]]


def parse_result(log: str) -> dict[str, Any] | None:
    """The last ``BENCH_RESULT {json}`` line a baseline printed, or None."""
    for line in reversed(log.splitlines()):
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX):])
    return None


def feedline_result(out: Path) -> dict[str, Any] | None:
    """Loss, samples and whatever breakdown Feedline's own ``summary.json`` has."""
    path = out / "summary.json"
    if not path.is_file():
        return None
    summary = json.loads(path.read_text())
    breakdown = {f"breakdown.{row['phase']}": float(row["seconds"])
                 for row in summary.get("breakdown") or []}
    return {"train_loss": summary.get("train_loss"), "samples": summary.get("samples"),
            "own": {"wall_seconds": summary.get("wall_seconds"),
                    "samples_per_second": summary.get("samples_per_second"),
                    "steady_samples_per_second": summary.get("steady_samples_per_second")},
            "breakdown": breakdown}


def _kill_group(proc: subprocess.Popen) -> None:
    """Stop a contender that ran past its timeout: its own process group only."""
    for sig, grace in ((signal.SIGTERM, 30), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def run_one(name: str, argv: list[str], out: Path, log_path: Path, *, cpus: int,
            timeout_s: float) -> dict[str, Any]:
    """Spawn one contender and time it until it exits (the user's wait)."""
    env = dict(os.environ)
    env.pop("RAY_ADDRESS", None)  # every contender starts (and stops) its own local Ray
    pin = cpus < (os.cpu_count() or cpus)
    with open(log_path, "w") as log:
        env[T0_ENV] = repr(time.time())
        start = time.perf_counter()
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=REPO,
                                start_new_session=True,
                                preexec_fn=(lambda: os.sched_setaffinity(0, range(cpus)))
                                if pin else None)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            rc = None
        wall = time.perf_counter() - start
    text = log_path.read_text(errors="replace")
    parsed = feedline_result(out) if name == "feedline" else parse_result(text)
    parsed = parsed or {}
    return {"contender": name, "rc": rc, "ok": rc == 0 and parsed.get("train_loss") is not None,
            "wall_s": wall, "train_loss": parsed.get("train_loss"),
            "samples": parsed.get("samples"),
            "marks": ({k: v for k, v in parsed.items() if k not in ("train_loss", "samples")}
                      if name != "feedline" else {}),
            "feedline": parsed if name == "feedline" else None,
            "log": str(log_path), "log_tail": "" if rc == 0 else text[-3000:]}


def _spread(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(runs: list[dict[str, Any]], names: Sequence[str], epochs: int) -> dict[str, Any]:
    """Medians (min-max) per contender, Feedline's speed ratio to each baseline, the targets."""
    per: dict[str, Any] = {}
    for name in names:
        mine = [r for r in runs if r["contender"] == name]
        ok = [r for r in mine if r["ok"]]
        wall = _spread([r["wall_s"] for r in ok])
        losses = [r["train_loss"] for r in ok]
        samples = ok[0]["samples"] if ok else None
        per[name] = {"label": LABELS[name], "runs": len(mine), "failed": len(mine) - len(ok),
                     "wall_s": wall, "train_loss": statistics.median(losses) if losses else None,
                     "samples": samples,
                     "user_samples_per_s": (samples / wall["median"]
                                            if wall and samples else None)}
    ratios = {}
    feedline = per.get("feedline")
    for name in names:
        if name == "feedline" or not feedline or not feedline["wall_s"] or not per[name]["wall_s"]:
            continue
        # paired by round: the spread of the ratio itself, not of two independent medians
        rounds = {r["round"]: r for r in runs if r["contender"] == "feedline" and r["ok"]}
        paired = [r["wall_s"] / rounds[r["round"]]["wall_s"] for r in runs
                  if r["contender"] == name and r["ok"] and r["round"] in rounds]
        ratios[name] = {"ratio": per[name]["wall_s"]["median"] / feedline["wall_s"]["median"],
                        "per_round": _spread(paired)}
    targets = []
    for name, goal in (("raytrain", 2.0), ("ddp", 0.8 if epochs >= 10 else 0.5)):
        if name in ratios:
            got = ratios[name]["ratio"]
            targets.append({"target": f"Feedline >= {goal:g}x {LABELS[name]} ({epochs} epochs)",
                            "value": got, "met": got >= goal})
    return {"contenders": per, "ratios": ratios, "targets": targets}


def machine() -> dict[str, Any]:
    import ray
    import torch

    model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        model = next((line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                      if line.startswith("model name")), "")
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "ray": ray.__version__, "torch": torch.__version__,
            "loadavg": list(os.getloadavg())}


def run_train_bench(bench: TrainBenchConfig,
                    progress: Callable[[str], None] = lambda msg: None) -> dict[str, Any]:
    """Generate the data once, run every round, return runs + summary (plain data)."""
    from pipeline.data.synthetic import write_synthetic

    errors = bench.check()
    if errors:
        raise ValueError("; ".join(errors))
    progress(f"data: {bench.samples} JPEGs {bench.source_size[0]}x{bench.source_size[1]} "
             f"under {bench.cache_dir} (written once)")
    data = write_synthetic(bench.cache_dir, count=bench.samples, size=bench.source_size,
                           fmt="jpeg", classes=bench.classes)
    job = load_job(bench, data)
    work = Path(bench.work_dir or tempfile.mkdtemp(prefix="feedline-bench-train-"))
    work.mkdir(parents=True, exist_ok=True)
    started = machine()
    runs = []
    for round_index in range(bench.rounds):
        for position, name in enumerate(rotation(bench.contenders, round_index)):
            out = work / f"r{round_index}-{name}"
            argv = command(name, bench, job, out)
            progress(f"round {round_index + 1}/{bench.rounds}: {LABELS[name]}")
            run = run_one(name, argv, out, work / f"r{round_index}-{name}.log",
                          cpus=job.cpus, timeout_s=bench.timeout_s)
            run |= {"round": round_index, "position": position}
            status = "ok" if run["ok"] else f"FAILED (exit {run['rc']}; log {run['log']})"
            progress(f"  {run['wall_s']:.1f} s, train_loss {run['train_loss']}: {status}")
            runs.append(run)
    return {"benchmark": "train", "config": asdict(bench), "job": asdict(job),
            "commands": {name: command(name, bench, job, work / f"r0-{name}")
                         for name in bench.contenders},
            "work_dir": str(work), "machine": started,
            "loadavg_after": list(os.getloadavg()), "runs": runs,
            **summarise(runs, bench.contenders, bench.epochs)}
