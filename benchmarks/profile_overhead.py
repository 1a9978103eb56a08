"""Profiling overhead as a share of step time, on a small CPU model.

Two measurements, because on a shared machine noise between runs is larger than the effect:

1. End to end: the same training loop with ``StepProfiler(enabled=True)`` and with
   ``enabled=False`` (the loop makes the same calls; a disabled profiler returns at once).
   Repetitions interleave the two (ABBA order, so slow drift of the machine cancels); the
   overhead is median(enabled steps) / median(disabled steps) − 1 over all repetitions'
   steps, and the per-repetition ratios of medians are printed to show the noise.
2. Direct: the cost of the profiler calls of one step (4 spans, one ``add``, ``step_done``)
   around no work, mean over many steps, divided by the disabled step time. This runs with
   the profiler's code hot in the cache, so it is a lower bound; (1) is the honest number.

Prints one JSON object and a Markdown table. Usage::

    python benchmarks/profile_overhead.py [--reps 9] [--steps 200] [--batch 64] [--width 512]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from pipeline.profile import StepProfiler


def _loop(prof: StepProfiler, model: torch.nn.Module, opt: torch.optim.Optimizer,
          batches: list[tuple[torch.Tensor, torch.Tensor]]) -> list[float]:
    times = []
    it = iter(batches)
    for _ in range(len(batches)):
        t0 = time.perf_counter()
        with prof.span("data_wait"):
            x, y = next(it)
        prof.add("h2d", 0.0, within="data_wait")
        with prof.span("forward"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        with prof.span("backward"):
            loss.backward()
        with prof.span("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        prof.step_done(samples=len(x))
        times.append(time.perf_counter() - t0)
    prof.epoch_summary()
    return times


def _calls_only(steps: int) -> float:
    prof = StepProfiler(rank=0, device=torch.device("cpu"))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        for phase in ("data_wait", "forward", "backward", "optimizer"):
            with prof.span(phase):
                pass
        prof.add("h2d", 0.0, within="data_wait")
        prof.step_done(samples=1)
        times.append(time.perf_counter() - t0)
    prof.epoch_summary()
    # The mean, not the median: steps are resolved in batches, so the cost lands on a few steps.
    return statistics.fmean(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--width", type=int, default=512)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)  # a shared machine: one thread keeps the comparison fair
    model = torch.nn.Sequential(torch.nn.Linear(256, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, args.width), torch.nn.ReLU(),
                                torch.nn.Linear(args.width, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = [(torch.randn(args.batch, 256), torch.randint(0, 10, (args.batch,)))
               for _ in range(args.steps)]
    _loop(StepProfiler(rank=0, device=torch.device("cpu"), enabled=False), model, opt, batches)
    medians: dict[bool, list[float]] = {True: [], False: []}
    pooled: dict[bool, list[float]] = {True: [], False: []}
    for rep in range(args.reps):
        order = (True, False) if rep % 2 == 0 else (False, True)  # ABBA: drift cancels
        for enabled in order:
            prof = StepProfiler(rank=0, device=torch.device("cpu"), enabled=enabled)
            times = _loop(prof, model, opt, batches)
            medians[enabled].append(statistics.median(times))
            pooled[enabled].extend(times)
    ratios = [(on - off) / off for on, off in zip(medians[True], medians[False], strict=True)]
    step_off = statistics.median(pooled[False])
    step_on = statistics.median(pooled[True])
    calls = _calls_only(max(1000, args.steps * 20))
    result = {
        "steps_per_rep": args.steps, "reps": args.reps, "batch": args.batch, "width": args.width,
        "step_ms_disabled": step_off * 1e3,
        "step_ms_enabled": step_on * 1e3,
        "overhead_end_to_end": step_on / step_off - 1,
        "overhead_end_to_end_per_rep": ratios,
        "profiler_calls_us_per_step": calls * 1e6,
        "overhead_direct": calls / step_off,
    }
    print(json.dumps(result, indent=2))
    print()
    print("| measure | value |")
    print("|---|---:|")
    print(f"| step time, profiler disabled | {result['step_ms_disabled']:.3f} ms |")
    print(f"| step time, profiler enabled | {result['step_ms_enabled']:.3f} ms |")
    print(f"| overhead end to end ({args.reps} interleaved reps × {args.steps} steps) | "
          f"{result['overhead_end_to_end']:+.2%} |")
    print(f"| profiler calls per step | {result['profiler_calls_us_per_step']:.1f} µs |")
    print(f"| overhead direct (calls / step time) | {result['overhead_direct']:.2%} |")


if __name__ == "__main__":
    main()
