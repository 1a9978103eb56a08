"""Profiling overhead as a share of step time: one process, and DDP with the timed comm hook.

Torch only (no Ray), so it runs on a bare GPU machine (``benchmarks/gpu_check.sh`` runs it).

``single``: the same training loop (the real loop's spans: ``data_wait`` with an ``h2d`` carve,
``forward``, ``backward``, ``optimizer``, ``step_done``; ``epoch_summary`` at the end of each
repetition) with the profiler off (``StepProfiler(enabled=False)``, every call returns at once)
and on. On CUDA "on" comes twice: CUDA events only (``nvtx=False``) and CUDA events + NVTX
ranges (the default). Batches are already on the device, so only the profiler differs.

``ddp``: ``world`` processes (gloo on CPU, NCCL on CUDA with one process per GPU), each wrapping
the same model with :func:`pipeline.collective.wrap_ddp` twice, as the training loop does:
profiling off = no comm hook (DDP's own C++ all-reduce) and ``StepProfiler(enabled=False)``;
profiling on = :func:`pipeline.profile.timed_hook` around torch's default ``allreduce_hook``
(a Python hook plus a future callback per bucket) and the spans. The number of buckets per step
the hook saw is reported, so a run where the hook never fired cannot pass as "no overhead".

Method, for both: the modes alternate within every repetition (rotated order, so slow drift of
a shared machine cancels); a repetition's step time is its wall time over its steps, with the
device synchronised at the end and ``epoch_summary`` included (on CUDA the profiler resolves its
events there). Overhead = median(on) / median(off) − 1, and beside it the median of the
per-repetition paired ratios on/off − 1 (robust to drift between repetitions); their min…max
shows the noise. DDP step time is the slower rank's. ``single`` also reports the direct cost of the
profiler calls of one step around no work (hot cache: a lower bound). Usage::

    python benchmarks/profile_overhead.py                     # single + ddp, auto device
    python benchmarks/profile_overhead.py --parts ddp --world 2 --device cpu
    python benchmarks/profile_overhead.py --quick --json out.json --md out.md
    python benchmarks/profile_overhead.py --parts single --device cuda --shapes 512x64,4096x512
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.profile import StepProfiler, timed_hook  # noqa: E402

IN_FEATURES, CLASSES = 256, 10


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _mlp(width: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(IN_FEATURES, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, width), torch.nn.ReLU(),
                               torch.nn.Linear(width, CLASSES))


def _batches(steps: int, batch: int, device: torch.device, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(batch, IN_FEATURES, generator=gen).to(device),
             torch.randint(0, CLASSES, (batch,), generator=gen).to(device))
            for _ in range(steps)]


def _train(prof: StepProfiler, model, opt, batches, device: torch.device) -> tuple[float, dict]:
    """One repetition of the real loop's span sequence; (seconds per step, epoch summary)."""
    _sync(device)
    t0 = time.perf_counter()
    it = iter(batches)
    for _ in range(len(batches)):
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
    summary = prof.epoch_summary()
    _sync(device)
    return (time.perf_counter() - t0) / len(batches), summary


def _modes(device: torch.device) -> list[str]:
    return ["off", "events", "events+nvtx"] if device.type == "cuda" else ["off", "on"]


def _profiler(mode: str, rank: int, device: torch.device) -> StepProfiler:
    return StepProfiler(rank=rank, device=device, enabled=mode != "off",
                        nvtx=mode == "events+nvtx")


def _rotated(modes: list[str], rep: int) -> list[str]:
    k = rep % len(modes)
    return modes[k:] + modes[:k]


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _overheads(times: dict[str, list[float]]) -> dict:
    off = statistics.median(times["off"])
    out = {}
    for mode, values in times.items():
        if mode == "off":
            continue
        paired = [on / base - 1 for on, base in zip(values, times["off"], strict=True)]
        out[mode] = {"overhead": statistics.median(values) / off - 1,
                     "paired_median": statistics.median(paired),
                     "per_rep": paired, "per_rep_min": min(paired), "per_rep_max": max(paired)}
    return out


def _phase_ms(summary: dict) -> dict:
    return {p: v["mean"] * 1e3 for p, v in summary["phases"].items()}


# ------------------------------------------------------------------------------- single
def _calls_only(steps: int, device: torch.device, nvtx: bool) -> float:
    prof = StepProfiler(rank=0, device=device, nvtx=nvtx)
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(steps):
        for phase in ("data_wait", "forward", "backward", "optimizer"):
            with prof.span(phase):
                pass
        prof.add("h2d", 0.0, within="data_wait")
        prof.step_done(samples=1)
    prof.epoch_summary()
    _sync(device)
    # The mean over all steps: steps are resolved in batches, so the cost lands on a few steps.
    return (time.perf_counter() - t0) / steps


def single(device: torch.device, *, shapes: list[tuple[int, int]], steps: int,
           reps: int) -> dict:
    modes = _modes(device)
    rows = []
    for width, batch in shapes:
        torch.manual_seed(0)
        model = _mlp(width).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        batches = _batches(steps, batch, device, seed=0)
        for mode in modes:  # warm-up: allocator, kernels, the profiler's code paths
            _train(_profiler(mode, 0, device), model, opt, batches[: max(20, steps // 4)], device)
        times: dict[str, list[float]] = {m: [] for m in modes}
        seen: dict[str, dict] = {}
        for rep in range(reps):
            for mode in _rotated(modes, rep):
                seconds, summary = _train(_profiler(mode, 0, device), model, opt, batches, device)
                times[mode].append(seconds)
                seen[mode] = summary
        calls = {m: _calls_only(max(1000, steps * 5), device, nvtx=m == "events+nvtx") * 1e6
                 for m in modes if m != "off"}
        off = statistics.median(times["off"])
        rows.append({
            "width": width, "batch": batch, "steps": steps, "reps": reps,
            "step_ms": {m: {k: v * 1e3 for k, v in _spread(t).items()} for m, t in times.items()},
            "overhead": _overheads(times),
            "calls_us_per_step": calls,
            "overhead_direct": {m: c / 1e6 / off for m, c in calls.items()},
            "profiled_phase_ms": {m: _phase_ms(s) for m, s in seen.items() if m != "off"},
        })
    return {"device": str(device), "modes": modes, "rows": rows}


# ------------------------------------------------------------------------------- ddp
def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ddp_rank(rank: int, port: int, out: str, cfg: dict) -> None:
    """One DDP rank (spawned): both wrappings of one model, interleaved repetitions."""
    import torch.distributed as dist

    from pipeline.collective import CollectiveConfig, init_process_group, wrap_ddp

    torch.set_num_threads(cfg["threads"])
    cuda = cfg["backend"] == "nccl"
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    coll = CollectiveConfig(backend=cfg["backend"], timeout_s=120.0,
                            bucket_cap_mb=cfg["bucket_mb"])
    init_process_group(coll, rank=rank, world_size=cfg["world"],
                       init_method=f"tcp://127.0.0.1:{port}", has_gpu=cuda)
    try:
        torch.manual_seed(0)
        base = _mlp(cfg["width"])
        prof_on = StepProfiler(rank=rank, device=device, enabled=True, nvtx=cuda)
        models = {
            "off": wrap_ddp(copy.deepcopy(base), coll, device=device),
            "on": wrap_ddp(copy.deepcopy(base), coll, device=device,
                           hook_wrapper=lambda h, s: timed_hook(h, s, prof_on.comm_timer)),
        }
        opts = {m: torch.optim.SGD(models[m].parameters(), lr=0.01) for m in models}
        profs = {"off": StepProfiler(rank=rank, device=device, enabled=False), "on": prof_on}
        batches = _batches(cfg["steps"], cfg["batch"], device, seed=rank)
        for mode in models:  # warm-up: DDP rebuilds its buckets after the first iteration
            _train(profs[mode], models[mode], opts[mode], batches[: max(10, cfg["steps"] // 4)],
                   device)
        buckets0 = prof_on.comm_timer.buckets_seen
        times: dict[str, list[float]] = {"off": [], "on": []}
        comm_ms: list[float] = []
        phases: dict = {}
        for rep in range(cfg["reps"]):
            for mode in _rotated(["off", "on"], rep):
                dist.barrier()  # both ranks start the repetition together, outside the clock
                seconds, summary = _train(profs[mode], models[mode], opts[mode], batches, device)
                times[mode].append(seconds)
                if mode == "on":
                    comm_ms.append(summary["phases"]["comm_exposed"]["mean"] * 1e3)
                    phases = _phase_ms(summary)
        buckets = (prof_on.comm_timer.buckets_seen - buckets0) / (cfg["reps"] * cfg["steps"])
        Path(out, f"rank{rank}.json").write_text(json.dumps(
            {"rank": rank, "times": times, "buckets_per_step": buckets,
             "comm_exposed_ms": comm_ms, "profiled_phase_ms": phases,
             "params": sum(p.numel() for p in base.parameters())}))
    finally:
        dist.destroy_process_group()


def ddp(*, world: int, backend: str, width: int, batch: int, steps: int, reps: int,
        bucket_mb: float, threads: int) -> dict:
    import torch.multiprocessing as mp

    cfg = {"world": world, "backend": backend, "width": width, "batch": batch, "steps": steps,
           "reps": reps, "bucket_mb": bucket_mb, "threads": threads}
    with tempfile.TemporaryDirectory(prefix="feedline-ddp-overhead-") as out:
        mp.spawn(_ddp_rank, args=(_free_port(), out, cfg), nprocs=world, join=True)
        ranks = [json.loads(Path(out, f"rank{r}.json").read_text()) for r in range(world)]
    # The job moves at its slowest rank's pace: per repetition, the max over ranks.
    times = {m: [max(r["times"][m][i] for r in ranks) for i in range(reps)] for m in ("off", "on")}
    return {**cfg, "device": "cuda" if backend == "nccl" else "cpu",
            "params": ranks[0]["params"],
            "step_ms": {m: {k: v * 1e3 for k, v in _spread(t).items()} for m, t in times.items()},
            "overhead": _overheads(times)["on"],
            "buckets_per_step": [r["buckets_per_step"] for r in ranks],
            "comm_exposed_ms": [statistics.median(r["comm_exposed_ms"]) for r in ranks],
            "profiled_phase_ms": [r["profiled_phase_ms"] for r in ranks]}


# ------------------------------------------------------------------------------- report
def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _ms(s: dict) -> str:
    return f"{s['median']:.3f} ({s['min']:.3f}–{s['max']:.3f})"


def _overhead_cell(o: dict) -> str:
    return (f"{o['overhead']:+.2%} / {o['paired_median']:+.2%} "
            f"({o['per_rep_min']:+.1%}…{o['per_rep_max']:+.1%})")


def markdown(result: dict) -> str:
    lines = [f"torch {result['torch']}, load average {result['load_average']} (a shared machine's "
             "noise can exceed the effect: read the per-repetition spread)"]
    sg = result.get("single")
    if sg:
        lines += ["", f"Single process on {sg['device']}: step ms, median (min–max) of "
                  "repetitions; overhead vs off: of the medians / median of the per-repetition "
                  "paired ratios (their min…max)", "",
                  "| width × batch | " + " | ".join(f"{m} ms" for m in sg["modes"])
                  + " | " + " | ".join(f"overhead {m}" for m in sg["modes"][1:])
                  + " | profiler calls µs/step |",
                  "|---|" + "---:|" * (2 * len(sg["modes"]))]
        for row in sg["rows"]:
            cells = [_ms(row["step_ms"][m]) for m in sg["modes"]]
            cells += [_overhead_cell(row["overhead"][m]) for m in sg["modes"][1:]]
            calls = ", ".join(f"{m} {v:.1f}" for m, v in row["calls_us_per_step"].items())
            lines.append(f"| {row['width']} × {row['batch']} | " + " | ".join(cells)
                         + f" | {calls} |")
    dd = result.get("ddp")
    if dd:
        fired = all(b > 0 for b in dd["buckets_per_step"])
        lines += ["", f"DDP, {dd['world']} × {dd['backend']} on {dd['device']} "
                  f"({dd['params']:,} parameters, bucket_cap_mb={dd['bucket_mb']}, "
                  f"{dd['threads']} thread(s) per rank, {dd['reps']} reps × {dd['steps']} steps): "
                  "off = DDP's C++ all-reduce, no spans; on = timed_hook(allreduce_hook) + spans",
                  "", "| off ms/step | on ms/step | overhead: of medians / paired "
                  "(per-rep min…max) | buckets/step "
                  "seen by the hook | comm_exposed ms/step |", "|---:|---:|---:|---:|---:|",
                  f"| {_ms(dd['step_ms']['off'])} | {_ms(dd['step_ms']['on'])} | "
                  f"{_overhead_cell(dd['overhead'])} | "
                  f"{', '.join(f'{b:.1f}' for b in dd['buckets_per_step'])} | "
                  f"{', '.join(f'{c:.3f}' for c in dd['comm_exposed_ms'])} |"]
        if not fired:
            lines.append("WARNING: the timed hook saw no bucket on some rank: the 'on' numbers "
                         "do not include the hook and understate the overhead.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="single,ddp", help="comma-separated: single, ddp")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (single part; ddp "
                        "uses nccl on cuda, gloo on cpu)")
    parser.add_argument("--quick", action="store_true", help="few steps and repetitions")
    parser.add_argument("--reps", type=int, help="repetitions (default 9, quick 4)")
    parser.add_argument("--steps", type=int, help="steps per repetition (default 200, quick 40)")
    parser.add_argument("--shapes", default="512x64",
                        help="single: comma-separated WIDTHxBATCH models, e.g. 512x64,4096x512 "
                        "(a launch-bound one shows the worst case, a larger one a busy device)")
    parser.add_argument("--ddp-width", type=int, default=512)
    parser.add_argument("--ddp-batch", type=int, default=64)
    parser.add_argument("--world", type=int, help="DDP processes (default 2 on cpu, GPUs on "
                        "cuda)")
    parser.add_argument("--bucket-mb", type=float, default=0.5,
                        help="DDP bucket_cap_mb (small: several buckets, so the per-bucket cost "
                        "shows)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per DDP rank")
    parser.add_argument("--json", metavar="PATH", help="also write JSON here")
    parser.add_argument("--md", metavar="PATH", help="also write the Markdown tables here")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"single", "ddp"}:
        parser.error(f"--parts ({args.parts!r}) must name single and/or ddp")
    reps = args.reps or (4 if args.quick else 9)
    steps = args.steps or (40 if args.quick else 200)
    if args.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch sees no CUDA device")
    result = {"torch": torch.__version__, "load_average": _load(), "quick": args.quick}
    if "single" in parts:
        torch.set_num_threads(1)  # a shared machine: one thread keeps the comparison fair
        try:
            shapes = [tuple(int(v) for v in s.lower().split("x")) for s in args.shapes.split(",")]
            if any(len(shape) != 2 or min(shape) < 1 for shape in shapes):
                raise ValueError(args.shapes)
        except ValueError:
            parser.error(f"--shapes ({args.shapes!r}) must be WIDTHxBATCH[,WIDTHxBATCH...]")
        result["single"] = single(device, shapes=shapes, steps=steps, reps=reps)
    if "ddp" in parts:
        cuda = device.type == "cuda"
        world = args.world or (torch.cuda.device_count() if cuda else 2)
        result["ddp"] = ddp(world=world, backend="nccl" if cuda else "gloo",
                            width=args.ddp_width, batch=args.ddp_batch, steps=steps, reps=reps,
                            bucket_mb=args.bucket_mb, threads=args.threads)
    text = markdown(result)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
