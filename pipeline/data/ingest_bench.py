"""The ingest benchmark: Feedline's data path beside raw Ray Data, DataLoader and the ceiling.

Driver only. One run answers "does Feedline feed a trainer faster than what I would write
myself?" on the machine at hand::

    write synthetic JPEGs once ─► warm-up round (A B C D, data-bound, outputs cross-checked;
                                  the ceiling's pace sets the compute-bound step time)
                              ─► reps x regimes x contenders, interleaved:
                                  A B C D (data-bound)  A B C D (compute-bound)  A B C D ...

Interleaving makes machine drift (other tenants, thermal state) hit every contender alike, and
the summary reports medians with min-max, plus ratios of Feedline's medians to each baseline.
In the data-bound regime the consumer does nothing; in the compute-bound regime it sleeps
``compute_factor`` x the ceiling's production time per batch after each batch, like a GPU step
that needs the pipeline to run at 1/compute_factor of the ceiling. Shared by
``pipeline bench ingest`` and ``benchmarks/ingest.py``; rendering lives in
:mod:`pipeline.data.ingest_report`.
"""

from __future__ import annotations

import gc
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.config.options import option
from pipeline.data._ingest_contenders import CONTENDERS, Workload
from pipeline.data._ingest_probe import ResourceProbe, time_pass
from pipeline.data.reader import ReaderSpec

logger = logging.getLogger(__name__)

REGIMES = ("data_bound", "compute_bound")
METRICS = ("steady_sps", "ttfb_s", "stall_fraction", "wait_p50_ms", "wait_p99_ms",
           "cpu_ms_per_sample", "peak_pss_mb", "peak_extra_mb", "store_peak_mb", "spilled_mb")
# ImageNet's channel statistics: the normalisation every vision trainer does.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CHECKSUM_RTOL = 1e-4


@dataclass(frozen=True, kw_only=True)
class IngestBenchConfig:
    """What the ingest benchmark decodes, how often, and with how many workers."""

    samples: int = option(4096, "synthetic images per pass", ge=1)
    source_size: tuple[int, int] = option((256, 256), "stored image (height, width)", ge=8)
    image_size: tuple[int, int] = option((128, 128), "decoded and resized (height, width)", ge=1)
    fmt: str = option("jpeg", "stored format: jpeg or png")
    batch_size: int = option(64, "samples per consumer batch, the same for every contender",
                             ge=1)
    reps: int = option(5, "interleaved repetitions of every contender and regime", ge=1)
    workers: int = option(0, "decode processes/actors per contender; 0 means os.cpu_count()",
                          ge=0)
    ray_cpus: int = option(0, "CPUs of the local Ray the benchmark starts when none is running; "
                              "0 means os.cpu_count()", ge=0)
    compute_factor: float = option(1.25, "compute-bound step = this x the ceiling's time per "
                                         "batch", gt=0)
    contenders: tuple[str, ...] = option(tuple(CONTENDERS), "which contenders run, in order")
    regimes: tuple[str, ...] = option(REGIMES, "data_bound and/or compute_bound")
    cache_dir: str = option("~/.cache/feedline/synthetic", "where the images are written once")
    timeout_s: float = option(300.0, "a contender that delivers no batch this long fails", gt=0)
    probe_interval_s: float = option(0.2, "memory and object-store sampling period", gt=0)

    def check(self) -> list[str]:
        errors = []
        unknown = sorted(set(self.contenders) - set(CONTENDERS))
        if unknown or not self.contenders:
            errors.append(f"contenders ({list(self.contenders)}) must be a non-empty subset of "
                          f"{list(CONTENDERS)}")
        if "compute_bound" in self.regimes and "ceiling" not in self.contenders:
            errors.append("regimes (compute_bound) needs the 'ceiling' contender: its pace "
                          "sets the step time")
        if not self.regimes or set(self.regimes) - set(REGIMES):
            errors.append(f"regimes ({list(self.regimes)}) must be a non-empty subset of "
                          f"{list(REGIMES)}")
        if self.fmt not in ("jpeg", "png"):
            errors.append(f"fmt ({self.fmt!r}) must be 'jpeg' or 'png'")
        return errors

    def resolved_workers(self) -> int:
        return self.workers or os.cpu_count() or 1


def _workload(config: IngestBenchConfig) -> Workload:
    from pipeline.data.sources.image_folder import plan_image_folder
    from pipeline.data.synthetic import write_synthetic

    root = write_synthetic(config.cache_dir, count=config.samples, size=config.source_size,
                           fmt=config.fmt)
    spec = ReaderSpec(kind="image", origin=str(root), image_size=config.image_size, channels=3,
                      mean=MEAN, std=STD)
    return Workload(root=str(root), manifest=plan_image_folder(root).manifest, spec=spec,
                    batch_size=config.batch_size, workers=config.resolved_workers(),
                    timeout_s=config.timeout_s)


def _one(name: str, work: Workload, *, sleep_s: float, verify: bool,
         interval_s: float) -> dict[str, Any]:
    with ResourceProbe(interval_s) as probe:
        started = time.perf_counter()
        with CONTENDERS[name](work) as batches:
            timing = time_pass(batches, started=started, sleep_s=sleep_s, verify=verify)
        # Ray Data's executor lives in reference cycles: collect it now, so its blocks leave
        # the object store inside this contender's window, not during the next one.
        gc.collect()
    expected = work.manifest.num_rows
    if timing["samples"] != expected:
        raise RuntimeError(f"{name} delivered {timing['samples']} samples, expected {expected}")
    resources = probe.result()
    cpu_ms = resources.pop("cpu_s") * 1e3 / expected
    return {**timing, "cpu_ms_per_sample": cpu_ms, **resources, "ray_in_tree": probe.ray_in_tree}


def _verify(outputs: dict[str, dict[int, float]], expected_ids: set[int]) -> None:
    """Every contender delivered every id once with the same pixels, or the run is invalid."""
    reference_name, reference = next(iter(outputs.items()))
    for name, sums in outputs.items():
        if set(sums) != expected_ids:
            missing = len(expected_ids - set(sums))
            raise RuntimeError(f"{name} delivered a different set of sample ids "
                               f"({missing} missing); the comparison would be meaningless")
        for sample_id, value in sums.items():
            ref = reference[sample_id]
            if abs(value - ref) > CHECKSUM_RTOL * max(1.0, abs(ref)):
                raise RuntimeError(f"{name} decoded sample {sample_id} differently from "
                                   f"{reference_name} (pixel sum {value} vs {ref})")


def run_ingest_bench(config: IngestBenchConfig,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the whole benchmark; returns plain data (see :func:`summarize`). Driver only."""
    errors = config.check()
    if errors:
        raise ValueError("; ".join(errors))
    say = progress or (lambda _msg: None)
    import ray.data

    load_before = os.getloadavg() if hasattr(os, "getloadavg") else None
    work = _workload(config)
    context = ray.data.DataContext.get_current()
    bars = context.enable_progress_bars
    context.enable_progress_bars = False  # output noise, the same for both Ray contenders
    runs: list[dict[str, Any]] = []
    try:
        from pipeline.train.session import ray_session

        # Workers' logs stay in Ray's log folder; a failure still raises here with its trace.
        with ray_session(None, config.ray_cpus, dashboard=False, log_to_driver=False) as session:
            started_ray = session.mode == "local"
            say(f"warm-up: {', '.join(config.contenders)} (outputs cross-checked)")
            warmup, sums = [], {}
            for name in config.contenders:
                run = _one(name, work, sleep_s=0.0, verify=True,
                           interval_s=config.probe_interval_s)
                sums[name] = run.pop("checksums")
                warmup.append({"contender": name, "regime": "data_bound", "rep": -1, **run})
            _verify(sums, set(work.manifest.column("id").to_pylist()))
            for rep in range(config.reps):
                for regime in config.regimes:
                    # The step tracks the ceiling's median pace so far, so a busy spell on a
                    # shared machine does not leave the compute-bound regime miscalibrated.
                    sleep_s = (_step_time(config, warmup + runs) if regime == "compute_bound"
                               else 0.0)
                    for name in config.contenders:
                        run = _one(name, work, sleep_s=sleep_s, verify=False,
                                   interval_s=config.probe_interval_s)
                        run.pop("checksums")
                        runs.append({"contender": name, "regime": regime, "rep": rep,
                                     "step_s": sleep_s, **run})
                        say(f"rep {rep + 1}/{config.reps} {regime:13s} {name:12s} "
                            f"{_fmt(run['steady_sps'], '.0f')} samples/s, "
                            f"stall {_fmt(run['stall_fraction'], '.1%')}")
            cluster_cpus = ray.cluster_resources().get("CPU")
    finally:
        context.enable_progress_bars = bars
    steps = [r["step_s"] for r in runs if r["regime"] == "compute_bound"]
    step_s = statistics.median(steps) if steps else 0.0
    result = summarize(config, runs, warmup=warmup, step_s=step_s, ray_started=started_ray,
                       cluster_cpus=cluster_cpus, root=work.root)
    # Other tenants' load is the noise no interleaving removes: record it next to the numbers.
    result["machine"]["load_average_before"] = load_before
    return result


def _step_time(config: IngestBenchConfig, done: list[dict[str, Any]]) -> float:
    """``compute_factor`` x the ceiling's median time per batch in the data-bound runs so far."""
    paces = [r["steady_sps"] for r in done if r["contender"] == "ceiling"
             and r["regime"] == "data_bound" and r["steady_sps"]]
    if not paces:
        raise RuntimeError("the compute-bound regime needs a data-bound ceiling run first; "
                           "keep 'ceiling' in contenders")
    return config.compute_factor * config.batch_size / statistics.median(paces)


def _fmt(value: float | None, spec: str) -> str:
    return "n/a" if value is None else format(value, spec)


def _stats(values: list[float | None]) -> dict[str, float | None]:
    present = [v for v in values if v is not None]
    if not present:
        return {"median": None, "min": None, "max": None}
    return {"median": statistics.median(present), "min": min(present), "max": max(present)}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def summarize(config: IngestBenchConfig, runs: list[dict[str, Any]], *,
              warmup: list[dict[str, Any]], step_s: float, ray_started: bool,
              cluster_cpus: float | None, root: str) -> dict[str, Any]:
    """Medians and min-max per contender and regime; Feedline's ratios; the issue's targets."""
    summary: dict[str, dict[str, Any]] = {}
    for regime in config.regimes:
        summary[regime] = {}
        for name in config.contenders:
            mine = [r for r in runs if r["regime"] == regime and r["contender"] == name]
            summary[regime][name] = {m: _stats([r[m] for r in mine]) for m in METRICS}
    ratios: dict[str, dict[str, Any]] = {}
    if "feedline" in config.contenders:
        for regime in config.regimes:
            ours = summary[regime]["feedline"]
            ratios[regime] = {
                base: {"throughput": _ratio(ours["steady_sps"]["median"],
                                            summary[regime][base]["steady_sps"]["median"]),
                       "peak_memory": _ratio(ours["peak_pss_mb"]["median"],
                                             summary[regime][base]["peak_pss_mb"]["median"])}
                for base in config.contenders if base != "feedline"}
    return {
        "benchmark": "ingest",
        "config": asdict(config) | {"workers": config.resolved_workers()},
        "machine": machine_description(cluster_cpus),
        "ray_started_by_benchmark": ray_started,
        "images": root,
        "compute_step_s": step_s,
        "summary": summary,
        "ratios": ratios,
        "targets": _targets(summary, ratios),
        "warmup": warmup,
        "runs": runs,
    }


def _targets(summary: dict[str, Any], ratios: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's acceptance numbers, each with the measured value and whether it holds."""
    out = []

    def add(name: str, value: float | None, ok: Callable[[float], bool]) -> None:
        out.append({"target": name, "value": value,
                    "met": None if value is None else bool(ok(value))})

    data = ratios.get("data_bound", {})
    if "raw_ray_data" in data:
        add("data-bound throughput >= 1.10x raw Ray Data", data["raw_ray_data"]["throughput"],
            lambda v: v >= 1.10)
        add("data-bound peak memory (PSS, all processes) <= raw Ray Data",
            data["raw_ray_data"]["peak_memory"], lambda v: v <= 1.0)
    if "dataloader" in data:
        add("data-bound throughput >= 1.0x DataLoader", data["dataloader"]["throughput"],
            lambda v: v >= 1.0)
    if "ceiling" in data:
        add("data-bound throughput >= 0.8 of the ceiling", data["ceiling"]["throughput"],
            lambda v: v >= 0.8)
    compute = summary.get("compute_bound", {}).get("feedline")
    if compute:
        add("compute-bound stall fraction <= 2%", compute["stall_fraction"]["median"],
            lambda v: v <= 0.02)
    return out


def machine_description(cluster_cpus: float | None = None) -> dict[str, Any]:
    """What a reader needs to judge the numbers: CPUs, CPU model, RAM, versions."""
    import numpy
    import PIL
    import ray
    import torch

    model = platform.processor() or ""
    try:
        with open("/proc/cpuinfo") as fh:
            model = next((line.split(":", 1)[1].strip() for line in fh
                          if line.startswith("model name")), model)
    except OSError:
        pass  # not Linux: platform.processor() is the best we have
    ram = None
    if hasattr(os, "sysconf") and "SC_PHYS_PAGES" in os.sysconf_names:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / (1 << 30)
    return {
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
        else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "ram_gib": round(ram, 1) if ram else None,
        "ray_cluster_cpus": cluster_cpus,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {"ray": ray.__version__, "torch": torch.__version__,
                     "numpy": numpy.__version__, "pillow": PIL.__version__},
        "load_average": os.getloadavg() if hasattr(os, "getloadavg") else None,
        "date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
    }
