"""Host→device copy benchmark: Feedline's pool against the copies a careful user writes.

Torch only (no Ray), so it runs on a bare GPU machine (``benchmarks/gpu_check.sh`` runs it)::

    python benchmarks/h2d.py                      # 256 KiB … 256 MiB, GB/s + compute overlap
    python benchmarks/h2d.py --quick              # small sizes, seconds on a laptop CPU
    python benchmarks/h2d.py --parts overlap      # only the overlap measurement
    python benchmarks/h2d.py --parts handoff      # the pool's fixed cost per batch
    python benchmarks/h2d.py --json out.json      # also write the numbers as JSON

Every method starts from fresh numpy arrays, as Ray Data hands them over, gets the same bytes
and is measured in the same run, in rotated order, median of ``--trials`` with min–max:

- ``pageable``: ``torch.from_numpy(a).to(dev)`` (on CPU ``copy=True`` so a copy happens at all).
- ``ray_style``: what Ray 2.60's ``iter_torch_batches(pin_memory=True, prefetch_batches=2)``
  does: a pool of min(4, prefetch) threads turns each batch into a tensor and ``pin_memory()``
  copies it into page-locked memory, ahead of the consumer; the consumer thread then calls
  ``.to(dev, non_blocking=True)`` on its current stream (Ray's ``DefaultFinalizeFn``), i.e. the
  compute stream. On CPU the thread's copy is a ``clone()`` (page-locking needs CUDA).
- ``pinned_reuse``: the hand-tuned loop: two page-locked buffers reused in turn (no allocation
  per batch), filled on the consumer thread, copied ``non_blocking`` on the compute stream; a
  buffer is refilled only after the event of its previous copy completed.
- ``pool``: :class:`~pipeline.transfer.DeviceFeeder` (one host copy into a pinned staging slot
  in a producer thread, device copy on a side stream, ``depth=2``).

Bandwidth: GB/s and time per batch of each method alone, the device synchronised before the
clock stops. Overlap: a matmul loop on the default stream as the consumer's compute, sized to
about one pool copy per step; per method the time of the copies alone, of the compute alone and
of both together, and ``overlap = (copy + compute − together) / min(copy, compute)``: 1 when the
shorter of the two is hidden completely, 0 when they run one after the other.

Hand-off: what the pool costs per batch beyond its copies (producer thread, queues, slot
events, bookkeeping), on batches shaped as Feedline's (a uint8 image, an int64 label and id; 26
KiB) so the copies themselves are nearly free. ``inline`` does the same copies on the consumer
thread (a reused buffer per field, then the device copy); ``pool`` is the DeviceFeeder.
Two numbers: with a consumer that only takes batches, pool − inline per batch (the whole cost,
threads included); and with a consumer whose step holds the host for 1 ms without the GIL (as
a GPU step does), the time the consumer spends inside ``next()`` per batch.

On CPU the "device" is host memory: the pool does two memcpys (into staging, then out), there is
no copy engine and the "overlap" is only what a second core can hide. The numbers are reported as
measured, labelled with the device.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import sys
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.transfer import DeviceFeeder, detect_device  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
FULL_SIZES = [256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
QUICK_SIZES = [256 * KIB, 1 * MIB, 4 * MIB]
RAY_PREFETCH = 2  # the hand-written Ray Train script: iter_torch_batches(prefetch_batches=2)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sources(nbytes: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.random(nbytes // 4, dtype=np.float32) for _ in range(count)]


# ------------------------------------------------------------------------------- methods
def _pageable(arrays, device):
    for a in arrays:
        yield torch.from_numpy(a).to(device, copy=True)


def _ray_style(arrays, device):
    cuda = device.type == "cuda"

    def collate(a: np.ndarray) -> torch.Tensor:  # Ray's format threadpool: tensor, then pin
        t = torch.as_tensor(a)
        return t.pin_memory() if cuda else t.clone()

    it = iter(arrays)
    with ThreadPoolExecutor(max_workers=min(4, RAY_PREFETCH),
                            thread_name_prefix="ray-style-format") as pool:
        pending = deque(pool.submit(collate, a) for a in itertools.islice(it, RAY_PREFETCH))
        while pending:
            host = pending.popleft().result()
            nxt = next(it, None)
            if nxt is not None:
                pending.append(pool.submit(collate, nxt))
            # Ray's finalize step, on the consumer thread and its current (compute) stream.
            yield host.to(device, non_blocking=True)


def _pinned_reuse(arrays, device):
    cuda = device.type == "cuda"
    buffers: list[torch.Tensor | None] = [None, None]
    copied: list[torch.cuda.Event | None] = [None, None]
    for i, a in enumerate(arrays):
        k = i % 2
        src = torch.from_numpy(a)
        buf = buffers[k]
        if buf is None or buf.numel() != src.numel() or buf.dtype != src.dtype:
            buf = buffers[k] = torch.empty(src.shape, dtype=src.dtype, pin_memory=cuda)
        if copied[k] is not None:
            copied[k].synchronize()  # its previous device copy has read the buffer
        buf.copy_(src)
        if not cuda:
            yield buf.clone()
            continue
        out = buf.to(device, non_blocking=True)  # on the current (compute) stream
        if copied[k] is None:
            copied[k] = torch.cuda.Event()
        copied[k].record()
        yield out


class _Pool:
    """The DeviceFeeder method; keeps the last feeder's stats for the report."""

    def __init__(self) -> None:
        self.last_stats = None

    def __call__(self, arrays, device):
        feeder = DeviceFeeder(({"x": a} for a in arrays), device=device, depth=2)
        for batch in feeder:
            yield batch["x"]
        self.last_stats = feeder.stats


_pool = _Pool()
METHODS = {"pageable": _pageable, "ray_style": _ray_style, "pinned_reuse": _pinned_reuse,
           "pool": _pool}
LABELS = {"pageable": "pageable .to()",
          "ray_style": "Ray-style: pin in thread pool, .to() on compute stream",
          "pinned_reuse": "reused pinned buffers, compute stream",
          "pool": "Feedline DeviceFeeder pool, side stream"}
SHORT = {"pageable": "pageable", "ray_style": "Ray-style", "pinned_reuse": "pinned reuse",
         "pool": "Feedline pool"}


# ------------------------------------------------------------------------------- timing
def _time(method: str, arrays, device, consume=None) -> float:
    _sync(device)
    start = time.perf_counter()
    for x in METHODS[method](arrays, device):
        if consume is not None:
            consume(x)
    _sync(device)
    return time.perf_counter() - start


def _rotations(trials: int) -> list[list[str]]:
    names = list(METHODS)
    return [names[t % len(names):] + names[:t % len(names)] for t in range(trials)]


def _stats(values: list[float]) -> dict:
    return {"median": float(np.median(values)), "min": float(min(values)),
            "max": float(max(values))}


def bandwidth(sizes, device, budget_bytes: int, max_iters: int, trials: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        iters = int(min(max_iters, max(4, budget_bytes // nbytes)))
        sources = _sources(nbytes, min(iters, 4))
        arrays = [sources[i % len(sources)] for i in range(iters)]
        for method in METHODS:
            _time(method, arrays[:3], device)  # warm caches, allocators and threads
        seconds: dict[str, list[float]] = {m: [] for m in METHODS}
        for order in _rotations(trials):
            for method in order:
                seconds[method].append(_time(method, arrays, device))
        for method in METHODS:
            s = _stats(seconds[method])
            row = {"size_bytes": nbytes, "method": method, "iters": iters,
                   "seconds": s["median"], "gbps": nbytes * iters / s["median"] / 1e9,
                   "gbps_min": nbytes * iters / s["max"] / 1e9,
                   "gbps_max": nbytes * iters / s["min"] / 1e9,
                   "batch_ms": s["median"] / iters * 1e3}
            if method == "pool" and _pool.last_stats is not None:
                row["pinned"] = _pool.last_stats.pinned
                row["pin_reason"] = _pool.last_stats.pin_reason
            rows.append(row)
    return rows


def _matmul(device: torch.device, n: int):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, device=device, dtype=dtype, generator=gen) / n ** 0.5
    b = torch.randn(n, n, device=device, dtype=dtype, generator=gen) / n ** 0.5

    def step(x: torch.Tensor, reps: int) -> torch.Tensor:
        out = x[:1].sum()  # the step reads its batch
        c = a
        for _ in range(reps):
            c = torch.mm(c, b).tanh_()
        return out + c[0, 0].float()
    return step


def overlap(nbytes: int, device, steps: int, n: int, trials: int) -> dict:
    step = _matmul(device, n)
    sources = _sources(nbytes, 2)
    arrays = [sources[i % 2] for i in range(steps)]
    on_device = torch.from_numpy(sources[0]).to(device)

    def compute_s(reps: int) -> float:
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step(on_device, reps)
        _sync(device)
        return (time.perf_counter() - start) / steps

    for method in METHODS:  # warm up every path and the matmul (cuBLAS handles, autotuning)
        _time(method, arrays[:3], device, consume=lambda x: step(x, 1))
    copy_pool = float(np.median([_time("pool", arrays, device) / steps for _ in range(3)]))
    one = float(np.median([compute_s(1) for _ in range(3)]))
    reps = max(1, round(copy_pool / one))  # compute ≈ one pool copy per step

    copy: dict[str, list[float]] = {m: [] for m in METHODS}
    both: dict[str, list[float]] = {m: [] for m in METHODS}
    compute: list[float] = []
    for order in _rotations(trials):
        compute.append(compute_s(reps))
        for method in order:
            copy[method].append(_time(method, arrays, device) / steps)
            both[method].append(_time(method, arrays, device,
                                      consume=lambda x: step(x, reps)) / steps)
    compute_med = float(np.median(compute))
    rows = []
    for method in METHODS:
        c, t = float(np.median(copy[method])), float(np.median(both[method]))
        # per trial, from the three timings taken side by side: its spread says how far a
        # figure above 1 (a pair faster than its copy alone: noise) can be trusted
        paired = [(ci + co - ti) / min(ci, co)
                  for ci, ti, co in zip(copy[method], both[method], compute, strict=True)]
        rows.append({"method": method, "copy_ms": c * 1e3, "together_ms": t * 1e3,
                     "together_ms_min": min(both[method]) * 1e3,
                     "together_ms_max": max(both[method]) * 1e3,
                     "overlap": (c + compute_med - t) / min(c, compute_med),
                     "overlap_min": min(paired), "overlap_max": max(paired)})
    return {"batch_bytes": nbytes, "steps": steps, "matmul_n": n, "matmul_reps": reps,
            "matmul_dtype": "bfloat16" if device.type == "cuda" else "float32",
            "compute_ms": compute_med * 1e3, "compute_ms_min": min(compute) * 1e3,
            "compute_ms_max": max(compute) * 1e3, "rows": rows}


# ------------------------------------------------------------------------------- hand-off
HANDOFF_BATCH = 32  # rows of a 3x16x16 uint8 image, an int64 label and id: 26 KiB


def _feedline_batches(count: int) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(0)
    n = HANDOFF_BATCH
    return [{"image": rng.integers(0, 255, (n, 3, 16, 16), dtype=np.uint8),
             "label": rng.integers(0, 10, n), "id": np.arange(i * n, (i + 1) * n)}
            for i in range(count)]


def _inline(batches, device):
    """The same copies on the consumer thread: a reused (pinned) buffer per field, then the
    device copy on the current stream; a buffer is refilled once its last copy is done."""
    cuda = device.type == "cuda"
    buffers: list[dict[str, torch.Tensor]] = [{}, {}]
    copied: list[torch.cuda.Event | None] = [None, None]
    for i, batch in enumerate(batches):
        k = i % 2
        if copied[k] is not None:
            copied[k].synchronize()
        out = {}
        for key, a in batch.items():
            src = torch.from_numpy(a)
            buf = buffers[k].get(key)
            if buf is None:
                buf = buffers[k][key] = torch.empty(src.shape, dtype=src.dtype, pin_memory=cuda)
            buf.copy_(src)
            out[key] = buf.to(device, non_blocking=True) if cuda else buf.clone()
        if cuda:
            copied[k] = copied[k] or torch.cuda.Event()
            copied[k].record()
        yield out


def _pool_fields(batches, device):
    yield from DeviceFeeder(batches, device=device, depth=2)


def handoff(device, count: int, trials: int, step_ms: float = 1.0) -> dict:
    batches = _feedline_batches(count)
    methods = {"inline": _inline, "pool": _pool_fields}
    for method in methods.values():  # warm up threads, allocators and caches
        for _ in method(batches[:8], device):
            pass
    idle: dict[str, list[float]] = {m: [] for m in methods}
    for t in range(trials):
        for name in (list(methods) if t % 2 == 0 else list(methods)[::-1]):
            _sync(device)
            start = time.perf_counter()
            for _ in methods[name](batches, device):
                pass
            _sync(device)
            idle[name].append((time.perf_counter() - start) / count)
    # A consumer busy with a 1 ms step that leaves the GIL (a GPU step's host side waits so):
    # the producer is ahead, and what the consumer pays per batch is its time in next().
    busy_steps = max(20, count // 20)
    inside: list[float] = []
    for _ in range(trials):
        feeder = iter(DeviceFeeder(batches[:busy_steps], device=device, depth=2))
        waits = []
        while True:
            start = time.perf_counter()
            batch = next(feeder, None)
            waits.append(time.perf_counter() - start)
            if batch is None:
                break
            time.sleep(step_ms / 1e3)
        inside.append(float(np.median(waits[1:-1])))
    per = {m: _stats(v) for m, v in idle.items()}
    paired = [p - i for p, i in zip(idle["pool"], idle["inline"], strict=True)]
    return {"batch_bytes": sum(a.nbytes for a in batches[0].values()),
            "fields": len(batches[0]), "batches": count, "trials": trials,
            "idle_us": {m: {k: v * 1e6 for k, v in s.items()} for m, s in per.items()},
            "handoff_us": (per["pool"]["median"] - per["inline"]["median"]) * 1e6,
            "handoff_us_min": min(paired) * 1e6, "handoff_us_max": max(paired) * 1e6,
            "busy_step_ms": step_ms,
            "next_us_busy": {k: v * 1e6 for k, v in _stats(inside).items()}}


# ------------------------------------------------------------------------------- report
def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def markdown(result: dict) -> str:
    lines = [f"device: {result['device']}  (torch {result['torch']}, quick={result['quick']}, "
             f"median of {result['trials']} rotated trials, load average "
             f"{result['load_average']})", ""]
    lines += ["Methods: " + "; ".join(f"**{SHORT[m]}** = {LABELS[m]}" for m in METHODS), ""]
    if "bandwidth" in result:
        lines += ["H2D bandwidth, GB/s (median, min–max) and ms per batch:", "",
                  "| batch | " + " | ".join(SHORT[m] for m in METHODS)
                  + " | pool / best other |", "|---|" + "---:|" * (len(METHODS) + 1)]
        by_size: dict[int, dict[str, dict]] = {}
        for row in result["bandwidth"]:
            by_size.setdefault(row["size_bytes"], {})[row["method"]] = row
        for nbytes, rows in by_size.items():
            cells = [f"{rows[m]['gbps']:.2f} ({rows[m]['gbps_min']:.2f}–{rows[m]['gbps_max']:.2f})"
                     f", {rows[m]['batch_ms']:.3f} ms" for m in METHODS]
            best = max(rows[m]["gbps"] for m in METHODS if m != "pool")
            pin = rows["pool"].get("pinned")
            note = "" if pin is None else (" (pool pinned)" if pin else " (pool pageable)")
            lines.append(f"| {_size(nbytes)} | " + " | ".join(cells)
                         + f" | {rows['pool']['gbps'] / best:.2f}×{note} |")
    if "handoff" in result:
        ho = result["handoff"]
        idle = ho["idle_us"]
        lines += ["", f"Hand-off: {ho['batches']} batches of {ho['batch_bytes'] / KIB:.0f} KiB "
                  f"({ho['fields']} fields), median of {ho['trials']} alternating trials:", "",
                  "| | µs per batch (min–max) |", "|---|---:|",
                  *(f"| {name}, consumer only takes batches | {v['median']:.1f} "
                    f"({v['min']:.1f}–{v['max']:.1f}) |" for name, v in idle.items()),
                  f"| **hand-off: pool − inline** | **{ho['handoff_us']:.1f}** "
                  f"({ho['handoff_us_min']:.1f}–{ho['handoff_us_max']:.1f} paired) |",
                  f"| pool, consumer's time in next() beside a {ho['busy_step_ms']:g} ms step | "
                  f"{ho['next_us_busy']['median']:.1f} ({ho['next_us_busy']['min']:.1f}–"
                  f"{ho['next_us_busy']['max']:.1f}) |"]
    if "overlap" in result:
        ov = result["overlap"]
        lines += ["", f"Copy/compute overlap: {_size(ov['batch_bytes'])} batches, {ov['steps']} "
                  f"steps, compute = {ov['matmul_reps']}× {ov['matmul_dtype']} matmul "
                  f"n={ov['matmul_n']} on the default stream: {ov['compute_ms']:.3f} ms/step "
                  f"alone ({ov['compute_ms_min']:.3f}–{ov['compute_ms_max']:.3f})", "",
                  "| method | copy alone ms/step | compute alone ms/step | together ms/step "
                  "(min–max) | overlap |", "|---|---:|---:|---:|---:|"]
        for row in ov["rows"]:
            lines.append(f"| {SHORT[row['method']]} | {row['copy_ms']:.3f} | "
                         f"{ov['compute_ms']:.3f} | {row['together_ms']:.3f} "
                         f"({row['together_ms_min']:.3f}–{row['together_ms_max']:.3f}) | "
                         f"{row['overlap']:.2f} ({row['overlap_min']:.2f}…"
                         f"{row['overlap_max']:.2f}) |")
        lines += ["", "overlap = (copy + compute − together) / min(copy, compute), of the "
                  "medians (per-trial min…max): 1 = the shorter is fully hidden, 0 = serial. "
                  "Above 1 is noise (a pair cannot run faster than its copy alone): read it "
                  "as fully hidden, as far as the spread allows."]
        if not result["device"].startswith("cuda"):
            lines.append("On CPU there is no copy engine and the cores are shared: these overlap "
                         "numbers only smoke-test the harness; they say nothing about a GPU.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few iterations")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--parts", default="bandwidth,overlap,handoff",
                        help="comma-separated: bandwidth, overlap, handoff")
    parser.add_argument("--trials", type=int, default=5, help="rotated repetitions per number")
    parser.add_argument("--json", metavar="PATH", help="also write JSON here ('-' = stdout)")
    parser.add_argument("--md", metavar="PATH", help="also write the Markdown tables here")
    args = parser.parse_args(argv)
    parts = {p.strip() for p in args.parts.split(",") if p.strip()}
    if not parts or parts - {"bandwidth", "overlap", "handoff"}:
        parser.error(f"--parts ({args.parts!r}) must name bandwidth, overlap or handoff")
    choice = detect_device(args.device)
    device = choice.device
    quick, cuda = args.quick, device.type == "cuda"
    torch.manual_seed(0)
    result = {"device": choice.reason, "torch": torch.__version__, "quick": quick,
              "host": platform.processor() or platform.machine(),
              "load_average": _load(), "trials": args.trials}
    if "bandwidth" in parts:
        result["bandwidth"] = bandwidth(QUICK_SIZES if quick else FULL_SIZES, device,
                                        budget_bytes=(64 if quick else 2048) * MIB,
                                        max_iters=64 if quick else 400, trials=args.trials)
    if "overlap" in parts:
        n = (4096 if cuda else 256) if quick else (8192 if cuda else 512)
        result["overlap"] = overlap(1 * MIB if quick else 64 * MIB, device,
                                    steps=8 if quick else 40, n=n, trials=args.trials)
    if "handoff" in parts:
        result["handoff"] = handoff(device, count=500 if quick else 4000, trials=args.trials)
    text = markdown(result)
    print(text)
    if args.md:
        Path(args.md).write_text(text + "\n")
    if args.json == "-":
        print(json.dumps(result, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
