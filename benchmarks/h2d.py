"""Host→device copy benchmark: pageable ``.to()`` vs per-batch ``pin_memory()`` vs the pool.

Torch only (no Ray), so it runs on a bare GPU machine::

    python benchmarks/h2d.py                 # 256 KiB … 256 MiB, GB/s + compute overlap
    python benchmarks/h2d.py --quick         # small sizes, seconds on a laptop CPU
    python benchmarks/h2d.py --json out.json # also write the numbers as JSON

Every method starts from fresh numpy arrays, as Ray Data hands them over, and is measured in
the same run. (a) ``torch.from_numpy(a).to(dev)`` (on CPU ``copy=True`` so a copy happens at
all); (b) ``.pin_memory().to(dev, non_blocking=True)`` per batch (what
``iter_torch_batches(pin_memory=True)`` does; CUDA only); (c) ``DeviceFeeder``. The overlap
run gives each method a matmul-bound step and reports the copy time left exposed:
``(step time with the method − step time with data already on the device) / step time``.
On CPU the device is host memory: the pool does two memcpys (into staging, then out), and the
"overlap" is only what a second core can hide; the numbers are reported as measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pipeline.transfer import DeviceFeeder, detect_device  # noqa: E402

KIB, MIB = 1 << 10, 1 << 20
FULL_SIZES = [256 * KIB, 1 * MIB, 4 * MIB, 16 * MIB, 64 * MIB, 256 * MIB]
QUICK_SIZES = [256 * KIB, 1 * MIB, 4 * MIB]


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sources(nbytes: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [rng.random(nbytes // 4, dtype=np.float32) for _ in range(count)]


def _pageable(arrays, device):
    for a in arrays:
        yield torch.from_numpy(a).to(device, copy=True)


def _pin_per_batch(arrays, device):
    for a in arrays:
        yield torch.from_numpy(a).pin_memory().to(device, non_blocking=True)


def _pool(arrays, device):
    for batch in DeviceFeeder(({"x": a} for a in arrays), device=device, depth=2):
        yield batch["x"]


METHODS = {"pageable": _pageable, "pin_per_batch": _pin_per_batch, "pool": _pool}
LABELS = {"pageable": "pageable .to()", "pin_per_batch": "pin_memory() per batch",
          "pool": "DeviceFeeder pool"}


def _available(method: str, device: torch.device) -> bool:
    return method != "pin_per_batch" or device.type == "cuda"


TRIALS = 5  # every timing is the median of this many runs (shared machines are noisy)


def _median(fn) -> float:
    return float(np.median([fn() for _ in range(TRIALS)]))


def _time(method: str, arrays, device) -> float:
    _sync(device)
    start = time.perf_counter()
    for _ in METHODS[method](arrays, device):
        pass
    _sync(device)
    return time.perf_counter() - start


def bandwidth(sizes, device, budget_bytes: int, max_iters: int) -> list[dict]:
    rows = []
    for nbytes in sizes:
        iters = int(min(max_iters, max(4, budget_bytes // nbytes)))
        pool_of_arrays = _sources(nbytes, min(iters, 4))
        arrays = [pool_of_arrays[i % len(pool_of_arrays)] for i in range(iters)]
        for method in METHODS:
            if not _available(method, device):
                rows.append({"size_bytes": nbytes, "method": method, "gbps": None,
                             "note": "n/a: pin_memory needs CUDA"})
                continue
            _time(method, arrays[:3], device)  # warm caches and allocators
            seconds = _median(lambda m=method, a=arrays: _time(m, a, device))
            rows.append({"size_bytes": nbytes, "method": method, "iters": iters,
                         "seconds": seconds, "gbps": nbytes * iters / seconds / 1e9})
    return rows


def _matmul_step(device: torch.device, n: int):
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)

    def step(x: torch.Tensor, reps: int) -> torch.Tensor:
        out = x[:1].sum()  # consume the batch
        c = a
        for _ in range(reps):
            c = torch.mm(c, b).tanh_()
        return out + c[0, 0].float()
    return step


def overlap(nbytes: int, device, steps: int, n: int) -> dict:
    step = _matmul_step(device, n)
    arrays = [_sources(nbytes, 2)[i % 2] for i in range(steps)]
    # The slowest method's per-batch copy time sets the compute so every method could hide it.
    copy_s = max(_time(m, arrays[:4], device) / 4 for m in METHODS if _available(m, device))

    def compute_s(reps: int) -> float:
        x = torch.from_numpy(arrays[0]).to(device)
        _sync(device)
        start = time.perf_counter()
        for _ in range(steps):
            step(x, reps)
        _sync(device)
        return (time.perf_counter() - start) / steps

    def method_s(method: str, reps: int) -> float:
        _sync(device)
        start = time.perf_counter()
        for x in METHODS[method](arrays, device):
            step(x, reps)
        _sync(device)
        return (time.perf_counter() - start) / steps

    one = compute_s(1)
    reps = max(1, int(np.ceil(3 * copy_s / one)))  # compute-bound: ~3× the slowest copy
    base = _median(lambda: compute_s(reps))
    rows = []
    for method in METHODS:
        if not _available(method, device):
            rows.append({"method": method, "step_ms": None, "note": "n/a"})
            continue
        for _ in METHODS[method](arrays[:3], device):
            pass
        per_step = _median(lambda m=method: method_s(m, reps))
        exposed = max(per_step - base, 0.0)
        rows.append({"method": method, "step_ms": per_step * 1e3, "exposed_ms": exposed * 1e3,
                     "exposed_share": exposed / per_step})
    return {"batch_bytes": nbytes, "matmul_n": n, "matmul_reps": reps,
            "compute_only_step_ms": base * 1e3, "slowest_copy_ms": copy_s * 1e3, "rows": rows}


def _load() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def _size(n: int) -> str:
    return f"{n // MIB} MiB" if n >= MIB else f"{n // KIB} KiB"


def markdown(result: dict) -> str:
    lines = [f"device: {result['device']}  (torch {result['torch']}, quick={result['quick']}, "
             f"median of {result['trials']}, load average {result['load_average']})",
             "", "| batch | " + " | ".join(f"{LABELS[m]} GB/s" for m in METHODS)
             + " | pool / pageable |", "|---|" + "---:|" * (len(METHODS) + 1)]
    by_size: dict[int, dict[str, dict]] = {}
    for row in result["bandwidth"]:
        by_size.setdefault(row["size_bytes"], {})[row["method"]] = row
    for nbytes, rows in by_size.items():
        cells = [f"{rows[m]['gbps']:.2f}" if rows[m]["gbps"] else "n/a" for m in METHODS]
        ratio = rows["pool"]["gbps"] / rows["pageable"]["gbps"]
        lines.append(f"| {_size(nbytes)} | " + " | ".join(cells) + f" | {ratio:.2f}× |")
    ov = result["overlap"]
    lines += ["", f"Compute overlap: {_size(ov['batch_bytes'])} batches, step = "
              f"{ov['matmul_reps']}× matmul n={ov['matmul_n']} "
              f"({ov['compute_only_step_ms']:.2f} ms with data already on the device)", "",
              "| method | step ms | exposed copy ms | exposed share of step |",
              "|---|---:|---:|---:|"]
    for row in ov["rows"]:
        if row["step_ms"] is None:
            lines.append(f"| {LABELS[row['method']]} | n/a | n/a | n/a |")
            continue
        lines.append(f"| {LABELS[row['method']]} | {row['step_ms']:.2f} | "
                     f"{row['exposed_ms']:.2f} | {row['exposed_share']:.1%} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes and few iterations")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    parser.add_argument("--json", metavar="PATH", help="also write JSON here ('-' = stdout)")
    args = parser.parse_args(argv)
    choice = detect_device(args.device)
    device = choice.device
    quick = args.quick
    torch.manual_seed(0)
    result = {
        "device": choice.reason, "torch": torch.__version__, "quick": quick,
        "host": platform.processor() or platform.machine(),
        "load_average": _load(), "trials": TRIALS,
        "bandwidth": bandwidth(QUICK_SIZES if quick else FULL_SIZES, device,
                               budget_bytes=(64 if quick else 2048) * MIB,
                               max_iters=64 if quick else 400),
        "overlap": overlap(1 * MIB if quick else 64 * MIB, device, steps=8 if quick else 30,
                           n=(256 if device.type == "cpu" else 4096) if quick else
                           (512 if device.type == "cpu" else 8192)),
    }
    print(markdown(result))
    if args.json == "-":
        print(json.dumps(result, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
