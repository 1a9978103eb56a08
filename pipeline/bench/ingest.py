"""The ingest benchmark: Feedline's data path beside the baselines a user would pick instead.

Driver only. One run answers "does Feedline get my trainer its data sooner than what I would
write myself?" on the machine at hand, counting what the user waits for::

    write synthetic JPEGs once ─► start (or join) Ray ─► idle baseline: PSS and CPU at rest
      ─► warm-up: every contender, 2 epochs, every sample's bytes cross-checked (CRC-32)
      ─► rep 1: A B C D E F   rep 2: B C D E F A   rep 3: C D E F A B ...   (rotated)
                each slot: a 1-epoch run, then a 3-epoch run, each on a fresh pipeline

A run's clock starts before the contender builds its pipeline and stops at the last batch of
its last epoch, so start-up, every epoch's first batch and per-epoch restarts are in the
headline samples/s. Steady-state rate (first batch of each epoch excluded) and times to first
batch are kept beside it under their own names. Each run's CPU seconds (every process of the
tree) and peak PSS are measured over the same window; the physical check
(:mod:`pipeline.bench.ingest_check`) rejects what the machine cannot have done. Summaries:
:mod:`pipeline.bench.ingest_summary`; rendering: :mod:`pipeline.bench.ingest_report`.
"""

from __future__ import annotations

import gc
import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from pipeline.bench import ingest_summary
from pipeline.bench._ingest_contenders import (
    Contender,
    Workload,
    feedline,
    feedline_cache,
    ray_data_defaults,
    ray_data_tuned,
)
from pipeline.bench._local_contenders import ceiling, crc, dataloader_tuned
from pipeline.bench._probe import MIB, TreeProbe, idle_baseline
from pipeline.bench.machine import cores, load_average, machine_description
from pipeline.config.options import option

logger = logging.getLogger(__name__)

CONTENDERS: dict[str, Contender] = {
    "feedline": feedline,
    "feedline_cache": feedline_cache,
    "ray_data_tuned": ray_data_tuned,
    "ray_data_defaults": ray_data_defaults,
    "dataloader_tuned": dataloader_tuned,
    "ceiling": ceiling,
}
USES_RAY = ("feedline", "feedline_cache", "ray_data_tuned", "ray_data_defaults")
WARMUP_EPOCHS = 2  # the second epoch's bytes are checked too: a cache must replay the same


@dataclass(frozen=True, kw_only=True)
class IngestBenchConfig:
    """What the ingest benchmark decodes, how often, and with how many workers."""

    samples: int = option(2048, "synthetic JPEGs per epoch", ge=1)
    source_size: tuple[int, int] = option((256, 256), "stored image (height, width)", ge=8)
    image_size: tuple[int, int] = option((128, 128), "decoded and resized (height, width)", ge=1)
    batch_size: int = option(64, "samples per consumer batch, the same for every contender",
                             ge=1)
    reps: int = option(5, "repetitions, contender order rotated each time", ge=1)
    epochs: tuple[int, ...] = option((1, 3), "epochs per timed run; one run of each per slot",
                                     ge=1)
    workers: int = option(0, "decode processes/actors per contender; 0 means every core", ge=0)
    ray_cpus: int = option(0, "CPUs of the local Ray the benchmark starts when none is running; "
                              "0 means every core", ge=0)
    contenders: tuple[str, ...] = option(tuple(CONTENDERS), "which contenders run")
    cache_dir: str = option("~/.cache/feedline/synthetic", "where the images are written once")
    timeout_s: float = option(300.0, "a contender that delivers no batch this long fails", gt=0)
    probe_interval_s: float = option(0.5, "CPU and memory sampling period (each sample costs "
                                          "the driver a few ms of CPU)", gt=0)
    settle_s: float = option(1.0, "seconds between runs, for the last contender's actors and "
                                  "workers to finish exiting", ge=0)

    def check(self) -> list[str]:
        errors = []
        unknown = sorted(set(self.contenders) - set(CONTENDERS))
        if unknown or not self.contenders:
            errors.append(f"contenders ({list(self.contenders)}) must be a non-empty subset of "
                          f"{list(CONTENDERS)}")
        if not self.epochs or len(set(self.epochs)) != len(self.epochs):
            errors.append(f"epochs ({list(self.epochs)}) must be distinct counts, e.g. [1, 3]")
        return errors

    def resolved_workers(self) -> int:
        return self.workers or cores()


def rotated(names: list[str], rep: int) -> list[str]:
    """Repetition ``rep``'s order: each contender moves one slot earlier every repetition, so
    machine drift and whatever the previous contender left behind hit everyone alike."""
    shift = rep % len(names)
    return names[shift:] + names[:shift]


def _workload(config: IngestBenchConfig) -> Workload:
    from pipeline.data.dataset import BATCHES_PER_BLOCK
    from pipeline.data.sources.image_folder import plan_image_folder
    from pipeline.data.synthetic import write_synthetic
    from pipeline.transfer import TransferConfig

    root = write_synthetic(config.cache_dir, count=config.samples, size=config.source_size)
    manifest = plan_image_folder(root).manifest
    # build_datasets shuffles the manifest once with data.seed (0): everyone reads that order
    order = np.random.default_rng(0).permutation(manifest.num_rows)
    column = {name: manifest.column(name).to_numpy(zero_copy_only=False)[order]
              for name in ("id", "path", "label")}
    return Workload(root=str(root), ids=column["id"].astype(np.int64),
                    paths=np.asarray(column["path"], dtype=str),
                    labels=column["label"].astype(np.int64), image_size=config.image_size,
                    batch_size=config.batch_size,
                    rows_per_block=BATCHES_PER_BLOCK * config.batch_size,
                    workers=config.resolved_workers(),
                    prefetch=TransferConfig().host_prefetch + TransferConfig().gpu_prefetch,
                    cores=cores(), timeout_s=config.timeout_s)


def _checksums(batch: dict[str, Any], work: Workload, name: str) -> dict[int, int]:
    ids = np.asarray(batch["id"]).tolist()
    if "crc" in batch:  # the ceiling computes them next to the decode
        return dict(zip(ids, np.asarray(batch["crc"]).tolist(), strict=True))
    image = batch["image"]
    image = image.numpy() if hasattr(image, "numpy") else np.asarray(image)
    shape = (3, *work.image_size)
    if image.dtype != np.uint8 or image.shape[1:] != shape:
        raise RuntimeError(f"{name} delivers {image.dtype} {list(image.shape[1:])}, not uint8 "
                           f"{list(shape)}: it does not do the same work as the others")
    return dict(zip(ids, crc(image).tolist(), strict=True))


def time_run(name: str, work: Workload, epochs: int, *, idle_pss_mb: float,
             interval_s: float, verify: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """One fresh pipeline, ``epochs`` passes; the run's record and (if asked) per-epoch CRCs."""
    detail, outputs = [], []
    with TreeProbe(interval_s) as probe:
        started = asked = time.perf_counter()
        with CONTENDERS[name](work) as epoch_batches:
            for index in range(epochs):
                first = last = None
                samples = first_size = 0
                sums: dict[int, int] = {}
                for batch in epoch_batches(index):
                    last = time.perf_counter()
                    size = len(batch["id"])
                    if first is None:
                        first, first_size = last, size
                    samples += size
                    if verify:
                        sums.update(_checksums(batch, work, name))
                    batch = None  # like a training step: do not hold it while asking again
                if first is None or samples != work.samples:
                    raise RuntimeError(f"{name} delivered {samples} samples in epoch "
                                       f"{index + 1}, expected {work.samples}")
                detail.append({"samples": samples, "ttfb_s": first - asked,
                               "wall_s": last - asked, "steady_s": last - first,
                               "steady_samples": samples - first_size})
                outputs.append(sums)
                asked = time.perf_counter()
            wall = last - started
            cpu_s = probe.cpu_seconds()
            status = getattr(epoch_batches, "status", None)
            decided = status() if status is not None else None
        # Ray Data's executor lives in reference cycles: collect it now, so its blocks leave
        # the object store inside this run's window (memory), not during the next one.
        gc.collect()
    total = epochs * work.samples
    steady_s = sum(d["steady_s"] for d in detail)
    record = {
        "contender": name, "epochs": epochs, "samples": total, "wall_s": wall,
        "e2e_sps": total / wall,
        "steady_sps": sum(d["steady_samples"] for d in detail) / steady_s if steady_s else None,
        "ttfb_s": detail[0]["ttfb_s"],
        "ttfb_later_s": (statistics.median(d["ttfb_s"] for d in detail[1:])
                         if epochs > 1 else None),
        "cpu_s": cpu_s, "cpu_ms_per_sample": cpu_s * 1e3 / total, "cores_used": cpu_s / wall,
        "peak_pss_mb": probe.peak_pss / MIB, "added_mb": probe.peak_pss / MIB - idle_pss_mb,
        "cpu_visible": probe.ray_in_tree or name not in USES_RAY,
        "epoch_detail": detail, "decided": decided,
    }
    return record, outputs


def verify_outputs(outputs: dict[str, list[dict[int, int]]], expected_ids: set[int]) -> None:
    """Every contender delivered every id once per epoch with the same bytes, or the run is
    invalid. The reference is the ceiling when it ran (the plain decode), else the first."""
    reference_name = "ceiling" if "ceiling" in outputs else next(iter(outputs))
    reference = outputs[reference_name][0]
    for name, epochs in outputs.items():
        for index, sums in enumerate(epochs):
            if set(sums) != expected_ids:
                missing = len(expected_ids - set(sums))
                raise RuntimeError(f"{name} delivered a different set of sample ids in epoch "
                                   f"{index + 1} ({missing} missing); the comparison would be "
                                   f"meaningless")
            wrong = [i for i, value in sums.items() if value != reference[i]]
            if wrong:
                raise RuntimeError(f"{name} decoded {len(wrong)} samples of epoch {index + 1} "
                                   f"differently from {reference_name} (first: id {wrong[0]}); "
                                   f"not the same work")


def run_ingest_bench(config: IngestBenchConfig,
                     progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Run the whole benchmark; returns plain data (JSON-ready). Driver only."""
    errors = config.check()
    if errors:
        raise ValueError("; ".join(errors))
    say = progress or (lambda _msg: None)
    import ray
    import ray.data

    from pipeline.cluster.session import ray_session

    load_before = load_average()
    work = _workload(config)
    names = list(config.contenders)
    context = ray.data.DataContext.get_current()
    bars, context.enable_progress_bars = context.enable_progress_bars, False
    runs: list[dict[str, Any]] = []
    warmup: list[dict[str, Any]] = []
    try:
        # Workers' logs stay in Ray's log folder; a failure still raises here with its trace.
        with ray_session(None, config.ray_cpus or cores(), dashboard=False,
                         log_to_driver=False) as session:
            idle = idle_baseline(interval_s=config.probe_interval_s)
            say(f"idle baseline: {idle['pss_mb']:,.0f} MiB PSS, {idle['cores']:.2f} cores busy")
            outputs = {}
            for name in names:
                say(f"warm-up {name}: {WARMUP_EPOCHS} epochs, bytes cross-checked")
                record, outputs[name] = time_run(
                    name, replace(work, verify=True), WARMUP_EPOCHS, idle_pss_mb=idle["pss_mb"],
                    interval_s=config.probe_interval_s, verify=True)
                warmup.append({**record, "rep": -1})
                time.sleep(config.settle_s)
            verify_outputs(outputs, set(work.ids.tolist()))
            for rep in range(config.reps):
                for slot, name in enumerate(rotated(names, rep)):
                    for epochs in config.epochs:
                        record, _ = time_run(name, work, epochs, idle_pss_mb=idle["pss_mb"],
                                             interval_s=config.probe_interval_s)
                        runs.append({**record, "rep": rep, "slot": slot})
                        say(f"rep {rep + 1}/{config.reps} {name:18s} {epochs} epoch(s): "
                            f"{record['e2e_sps']:,.0f} samples/s end to end, "
                            f"{record['cores_used']:.2f} cores, +{record['added_mb']:,.0f} MiB")
                        time.sleep(config.settle_s)
            cluster_cpus = ray.cluster_resources().get("CPU")
            started_ray = session.mode == "local"
    finally:
        context.enable_progress_bars = bars
    machine = machine_description(cluster_cpus) | {"load_average_before": load_before}
    summary = ingest_summary.summarize_runs(runs, names)
    checks = ingest_summary.verdicts(runs, names, cores=work.cores)
    ratios = ingest_summary.ratios(summary, checks)
    return {
        "benchmark": "ingest",
        "config": asdict(config) | {"workers": work.workers},
        "workload": {"images": work.root, "samples": work.samples, "workers": work.workers,
                     "prefetch": work.prefetch, "rows_per_block": work.rows_per_block,
                     "batch_size": work.batch_size, "cores": work.cores,
                     "output": f"uint8 3x{work.image_size[0]}x{work.image_size[1]}"},
        "machine": machine,
        "ray_started_by_benchmark": started_ray,
        "idle": idle,
        "summary": summary,
        "verdicts": checks,
        "ratios": ratios,
        "targets": ingest_summary.targets(summary, ratios),
        "warmup": warmup,
        "runs": runs,
    }
