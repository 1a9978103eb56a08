"""Soak: a long multi-epoch run, sampling the memory of every Ray process as it goes.

    python benchmarks/soak.py --minutes 10 [--config examples/quickstart.yaml] [--json FILE]

Every ``--interval`` seconds it records the RSS of each Ray process on this machine (raylet,
GCS, workers, actors: every process whose command line is Ray's) and the object store's use
and spilled bytes. At the end it fits a line to each long-lived process's RSS after the warm-up
and reports the slope in MiB/min: a leak shows as a steady positive slope (goal < 1 MiB/min per
process). RSS includes pages of the object store a process has mapped (shared, bounded by the
store); the anonymous part (RssAnon: heap, thread stacks, native allocations) is fitted too, as
that is where a leak grows. Output: a Markdown table on stdout and JSON with every sample.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import threading
import time
from pathlib import Path

import numpy as np

from pipeline.procfs import ProcessTree

ROOT = Path(__file__).resolve().parents[1]
MIB = float(1 << 20)
RAY_MARKERS = ("ray::", "raylet", "gcs_server", "ray/dashboard", "log_monitor", "monitor.py",
               "runtime_env", "default_worker.py")


def ray_processes() -> dict[int, tuple[str, float, float]]:
    """pid → (name, RSS MiB, anonymous RSS MiB) of this driver's Ray processes (not other Rays
    on the machine)."""
    out = {}
    for pid in ProcessTree(os.getpid()).scan().keys() - {os.getpid()}:
        entry = Path("/proc") / str(pid)
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
            status = (entry / "status").read_text()
        except OSError:  # the process ended while we looked
            continue
        if not any(m in cmdline for m in RAY_MARKERS):
            continue
        kib = {line.split(":")[0]: int(line.split()[1]) for line in status.splitlines()
               if line.startswith(("VmRSS:", "RssAnon:"))}
        name = cmdline.split()[0] if cmdline.startswith("ray::") else Path(
            cmdline.split()[0]).name + " " + " ".join(
            Path(a).name for a in cmdline.split()[1:2])
        out[int(entry.name)] = (name, kib.get("VmRSS", 0) * 1024 / MIB,
                                kib.get("RssAnon", 0) * 1024 / MIB)
    return out


def _maps_jemalloc(pid: int) -> bool:
    try:
        return "libjemalloc" in (Path("/proc") / str(pid) / "maps").read_text()
    except OSError:
        return False


class Sampler(threading.Thread):
    """Samples in the background until ``stop`` is set; errors surface in ``join_and_check``."""

    def __init__(self, interval_s: float):
        super().__init__(name="soak-sampler", daemon=True)
        self.interval_s = interval_s
        self.stop = threading.Event()
        self.samples: list[dict] = []
        self.error: BaseException | None = None
        self.jemalloc: list[str] = []
        from pipeline.profile.object_store import object_store_reader

        self.store = object_store_reader()

    def run(self) -> None:
        start = time.monotonic()
        try:
            while not self.stop.wait(self.interval_s):
                used, spilled = self.store() if self.store else (0, 0)
                processes = ray_processes()
                self.samples.append({"t_min": (time.monotonic() - start) / 60,
                                     "processes": processes,
                                     "store_mib": used / MIB, "spilled_mib": spilled / MIB})
                if len(self.samples) == 6:  # training under way: which processes run jemalloc
                    self.jemalloc = sorted(f"{name} ({pid})" for pid, (name, *_) in
                                           processes.items() if _maps_jemalloc(pid))
        except BaseException as exc:  # re-raised on the main thread
            self.error = exc

    def join_and_check(self) -> None:
        self.stop.set()
        self.join(timeout=60)
        if self.error is not None:
            raise RuntimeError("soak sampler failed") from self.error


def _slope(t: np.ndarray, y: np.ndarray) -> float:
    """Least-squares MiB/min; 0 when all samples share one time."""
    return float(np.polyfit(t, y, 1)[0]) if np.ptp(t) > 0 else 0.0


def slopes(samples: list[dict], warmup_min: float) -> list[dict]:
    """MiB/min of each process present in at least half the post-warm-up samples."""
    late = [s for s in samples if s["t_min"] >= warmup_min]
    series: dict[int, list[tuple[float, float, float]]] = {}
    names: dict[int, str] = {}
    for sample in late:
        for pid, (name, rss, anon) in sample["processes"].items():
            series.setdefault(pid, []).append((sample["t_min"], rss, anon))
            names[pid] = name
    rows = []
    for pid, points in series.items():
        if len(points) < max(3, len(late) // 2):
            continue  # short-lived: a task worker, not a leak candidate
        t, rss, anon = np.array(points).T
        rows.append({"pid": pid, "name": names[pid], "samples": len(points),
                     "rss_start_mib": float(rss[0]), "rss_end_mib": float(rss[-1]),
                     "slope_mib_per_min": _slope(t, rss),
                     "anon_slope_mib_per_min": _slope(t, anon)})
    return sorted(rows, key=lambda r: -r["slope_mib_per_min"])


def calibrate(args: argparse.Namespace) -> int:
    """Epochs that make the soak last about ``--minutes``, from two steady epochs."""
    import pipeline

    probe = pipeline.run(args.config, sets=args.sets, show_progress=False, **{
        "train.epochs": 2, "run.output": f"{args.output}/calibrate", "profile.enabled": False})
    epoch_s = sum(r["epoch_seconds"] for r in map(json.loads, (probe.output / "metrics.jsonl")
                                                   .read_text().splitlines())
                  if r.get("type") != "pool") / 2 * 1.1  # + validation, checkpoint (~10%)
    return max(2, math.ceil(args.minutes * 60 / epoch_s))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--epochs", type=int, default=0,
                        help="run this many epochs instead of calibrating to --minutes")
    parser.add_argument("--config", default=str(ROOT / "examples" / "quickstart.yaml"))
    parser.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--warmup", type=float, default=2.0, help="minutes ignored by the fit")
    parser.add_argument("--output", default="runs/soak")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE",
                        help="config override, e.g. data.cache=off (stream every epoch)")
    parser.add_argument("--allocator", choices=("system", "jemalloc"), default="system",
                        help="run.allocator: jemalloc preloads it into the job's workers")
    args = parser.parse_args()

    import pipeline
    from pipeline.cluster.session import ray_session

    with ray_session(allocator=args.allocator):
        epochs = args.epochs or calibrate(args)
        sampler = Sampler(args.interval)
        sampler.start()
        started = time.monotonic()
        try:
            result = pipeline.run(args.config, sets=args.sets, show_progress=False, **{
                "train.epochs": epochs, "run.output": f"{args.output}/run"})
        finally:
            sampler.join_and_check()
        minutes = (time.monotonic() - started) / 60

    rows = slopes(sampler.samples, args.warmup)
    worst = rows[0] if rows else None
    report = {
        "machine": {"cpus": os.cpu_count(), "processor": platform.processor(),
                    "python": platform.python_version()},
        "config": args.config, "sets": args.sets, "epochs": epochs, "minutes": minutes,
        "samples_per_second": result.summary["samples_per_second"],
        "exactly_once": result.summary.get("exactly_once"),
        "store_peak_mib": max((s["store_mib"] for s in sampler.samples), default=0.0),
        "spilled_mib": max((s["spilled_mib"] for s in sampler.samples), default=0.0),
        "max_slope_mib_per_min": worst["slope_mib_per_min"] if worst else None,
        "allocator": args.allocator,
        "jemalloc_loaded_in": sampler.jemalloc,
        "processes": rows,
        "samples": [{**s, "processes": {str(p): v for p, v in s["processes"].items()}}
                    for s in sampler.samples],
    }
    print(f"soak: {epochs} epochs in {minutes:.1f} min, "
          f"{report['samples_per_second']:.0f} samples/s, exactly once: "
          f"{report['exactly_once']}, object store peak {report['store_peak_mib']:.1f} MiB, "
          f"spilled {report['spilled_mib']:.1f} MiB, allocator {args.allocator} "
          f"(jemalloc mapped in {len(sampler.jemalloc)} processes)\n")
    print("| process | samples | RSS start MiB | RSS end MiB | RSS slope MiB/min "
          "| anon slope MiB/min |")
    print("|---|---:|---:|---:|---:|---:|")
    for row in rows:
        print(f"| {row['name']} ({row['pid']}) | {row['samples']} | {row['rss_start_mib']:.1f} "
              f"| {row['rss_end_mib']:.1f} | {row['slope_mib_per_min']:+.3f} "
              f"| {row['anon_slope_mib_per_min']:+.3f} |")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
