"""What a job writes from the ranks' records once training ends: the merged profile with its
diagnosis, timeline, plot and report, and the transfer stage's totals."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import Config
from pipeline.job.progress import ProgressMonitor


def write_profile(config: Config, output: Path, monitor: ProgressMonitor, *,
                  device: str, data_cpus: float | None = None) -> dict[str, Any]:
    """Merge the ranks' spans, diagnose, write profile.json, timeline, plot and report.
    ``data_cpus``: what the plan gave preprocessing (the advice stays within it)."""
    from pipeline.profile import (
        combine_summaries,
        context_from_config,
        diagnose,
        load_profile,
        merge_ranks,
        save_profile,
        summary_fields,
        write_artifacts,
    )

    # every window of a rank: its epochs, then the tail after the last one (last checkpoint)
    ranks = {rank: combine_summaries([*epochs.values(),
                                      *([monitor.profile_tails[rank]]
                                        if rank in monitor.profile_tails else [])])
             for rank, epochs in monitor.profiles.items()}
    merged = merge_ranks(ranks)
    share = monitor.pool.cpu_share() if monitor.pool is not None else None
    context = context_from_config(config, device=device) | (
        {"plan.data_cpus": data_cpus} if data_cpus is not None else {}) | (
        {"pool.decode_cpu_share": share} if share is not None else {})
    diagnosis = diagnose(merged, monitor.data_ops, config.profile, context)
    elapsed, throughput = 0.0, []
    for m in monitor.epoch_metrics:
        elapsed += m["epoch_seconds"]
        throughput.append({"time_s": elapsed, "samples_per_s": m["samples_per_second"],
                           "epoch": m["epoch"]})
    save_profile(output, ranks=ranks, merged=merged, data_ops=monitor.data_ops,
                 throughput=throughput, context=context, events=monitor.events,
                 diagnosis=diagnosis,
                 pool=monitor.pool.summary() if monitor.pool is not None else None)
    write_artifacts(output, load_profile(output), diagnosis)
    return summary_fields(merged, diagnosis)


def sum_transfer(per_rank: dict[int, dict]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for stats in per_rank.values():
        for key, value in stats.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = out.get(key, 0) + value
            else:
                out.setdefault(key, value)
    return out
