"""Training parity: does ``pipeline run`` train as well as plain DDP with ``DistributedSampler``?

Issue 28: a framework must not quietly train worse than the script it replaces. For each seed
this runs the same job twice and compares the final epoch's mean train loss and the
validation accuracy after it:

=========  ==================================================================================
feedline   ``pipeline run CONFIG --set data.seed=S --set train.seed=S`` (its own local Ray), as
           a user runs it (``--checkout DIR`` runs another checkout's Feedline, e.g. before a
           change)
ddp        torch DDP over gloo, one process per rank, ``DistributedSampler(shuffle=True,
           seed=S)`` with ``set_epoch`` every epoch: the samples of the same split (Feedline's
           own manifest and ``validation_mask``), decoded once by Feedline's own reader, the
           same model (``train.model`` seeded by ``train.seed``), optimizer, schedule, batch
           size, workers and threads per worker
=========  ==================================================================================

Only the order in which samples reach the ranks differs, which is what this measures. The DDP
side decodes everything up front (it is not timed: this is about what training learns, not how
fast). Parity: Feedline's median within the spread the seeds give (``|median_f - median_d| <=
max(range_f, range_d)``)::

    python benchmarks/parity.py --job quickstart --seeds 0 1 2 --save
    python benchmarks/parity.py --job train --epochs 10 --seeds 0 1 2 --save
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
NOTES = {
    "quickstart": "scikit-learn's digits; the wall time is not a speed comparison: the DDP "
                  "side decodes every sample before it starts, untimed (`pipeline bench train` "
                  "times whole jobs).",
    "train": "The synthetic JPEGs carry no label signal (a label is a run of ids, an image is "
             "noise drawn from its id), so validation accuracy is chance (~0.1) for every "
             "contender: the final train loss (how fast the set is learned by heart, which "
             "the order of samples changes) is the comparison. Wall time as above.",
}
#: the metrics parity is judged on: the train job's accuracy is chance for everyone (NOTES)
JUDGED = {"quickstart": ("train_loss", "val_accuracy"), "train": ("train_loss",)}
JOBS = {
    "quickstart": (REPO / "examples" / "quickstart.yaml", []),
    # pipeline bench train's job, with a validation split so accuracy can be compared
    "train": (REPO / "benchmarks" / "configs" / "train_job.yaml", ["data.val_fraction=0.2"]),
}


def feedline(config: Path, sets: list[str], seed: int, checkout: Path) -> dict[str, Any]:
    """One ``pipeline run`` in its own process; its final loss and validation accuracy."""
    with tempfile.TemporaryDirectory(prefix="feedline-parity-") as out:
        cmd = [sys.executable, "-m", "pipeline", "run", str(config), "--output", out]
        for item in [*sets, f"data.seed={seed}", f"train.seed={seed}"]:
            cmd += ["--set", item]
        env = dict(os.environ, PYTHONPATH=str(checkout))
        started = time.perf_counter()
        done = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"pipeline run failed ({done.returncode}):\n{done.stdout[-3000:]}"
                               f"\n{done.stderr[-3000:]}")
        summary = json.loads((Path(out) / "summary.json").read_text())
        epochs = [json.loads(line) for line in (Path(out) / "metrics.jsonl").read_text()
                  .splitlines() if '"train_loss"' in line]
        return {"train_loss": epochs[-1]["train_loss"], "val_accuracy": summary["val_accuracy"],
                "epochs": len(epochs), "wall_s": time.perf_counter() - started,
                "samples": summary["samples"]}


def decoded_split(config: Path, sets: list[str], seed: int) -> dict[str, Any]:
    """The job's train and validation samples, as Feedline splits and decodes them."""
    from pipeline.config import load_config
    from pipeline.data.dataset import plan_source
    from pipeline.data.split import validation_mask
    from pipeline.data.udf.reader import SampleReader

    cfg = load_config(config, [*sets, f"data.seed={seed}", f"train.seed={seed}"])
    plan, spec = plan_source(cfg.data)
    reader = SampleReader(replace(spec, ship_uint8=False))  # float32, normalised
    manifest = plan.manifest
    columns = {name: manifest.column(name).to_numpy(zero_copy_only=False)
               for name in manifest.column_names}
    rows = [reader._convert({k: v[i:i + 256] for k, v in columns.items()})
            for i in range(0, manifest.num_rows, 256)]
    x = np.concatenate([r["image"] for r in rows])
    y = np.concatenate([r["label"] for r in rows])
    ids = np.concatenate([r["id"] for r in rows])
    is_val = validation_mask(ids, cfg.data.val_fraction, cfg.data.seed)
    return {"cfg": cfg, "classes": len(plan.classes), "train": (x[~is_val], y[~is_val]),
            "val": (x[is_val], y[is_val])}


def ddp(config: Path, sets: list[str], seed: int, epochs: int) -> dict[str, Any]:
    """The same job under plain DDP with DistributedSampler (one process per rank)."""
    import torch
    import torch.multiprocessing as mp

    data = decoded_split(config, sets + [f"train.epochs={epochs}"], seed)
    cfg = data["cfg"]
    tensors = [torch.from_numpy(a) for a in (*data["train"], *data["val"])]
    port = _free_port()
    with tempfile.TemporaryDirectory() as tmp:
        result = Path(tmp) / "result.json"
        started = time.perf_counter()
        mp.spawn(_ddp_rank, args=(cfg, data["classes"], tensors, port, seed, str(result)),
                 nprocs=cfg.train.num_workers, join=True)
        out = json.loads(result.read_text())
    return out | {"wall_s": time.perf_counter() - started, "epochs": cfg.train.epochs}


def _ddp_rank(rank: int, cfg: Any, classes: int, tensors: list, port: int, seed: int,
              result: str) -> None:
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    from pipeline.train.models import build_model
    from pipeline.train.step import schedule_steps
    from pipeline.train.task import default_optimizer, default_scheduler

    world = cfg.train.num_workers
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(max(1, int(cfg.train.cpus_per_worker)))  # as Feedline's workers
    torch.manual_seed(cfg.train.seed)
    x, y, vx, vy = tensors
    model = build_model(cfg.train.model, input_shape=tuple(x.shape[1:]), num_classes=classes)
    ddp_model = DistributedDataParallel(model)
    optimizer = default_optimizer(model, cfg.train)
    total = schedule_steps(num_train=len(x), world=world, batch_size=cfg.train.batch_size,
                           accum=1, epochs=cfg.train.epochs)
    scheduler = default_scheduler(optimizer, cfg.train, total)
    sampler = DistributedSampler(TensorDataset(x, y), num_replicas=world, rank=rank,
                                 shuffle=True, seed=seed)
    loader = DataLoader(TensorDataset(x, y), batch_size=cfg.train.batch_size, sampler=sampler)
    for epoch in range(cfg.train.epochs):
        sampler.set_epoch(epoch)
        sums = torch.zeros(2, dtype=torch.float64)
        for xb, yb in loader:
            loss = F.cross_entropy(ddp_model(xb), yb)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            sums += torch.tensor([loss.item(), 1.0], dtype=torch.float64)
        dist.all_reduce(sums)  # the mean of every rank's batch losses, as Feedline reports
    if rank == 0:
        model.eval()
        with torch.no_grad():
            correct = sum(int((model(vx[i:i + 512]).argmax(1) == vy[i:i + 512]).sum())
                          for i in range(0, len(vx), 512))
        Path(result).write_text(json.dumps({"train_loss": float(sums[0] / sums[1]),
                                            "val_accuracy": correct / max(1, len(vx)),
                                            "samples": len(x)}))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def summarise(rows: list[dict[str, Any]],
              judged: tuple[str, ...] = ("train_loss", "val_accuracy")) -> dict[str, Any]:
    """Per contender: median and range of each metric; and whether Feedline is within the
    seeds' spread on each ``judged`` metric."""
    out: dict[str, Any] = {}
    for name in sorted({r["contender"] for r in rows}):
        mine = [r for r in rows if r["contender"] == name]
        out[name] = {m: {"median": statistics.median(r[m] for r in mine),
                         "min": min(r[m] for r in mine), "max": max(r[m] for r in mine)}
                     for m in ("train_loss", "val_accuracy")}
    if "feedline" in out and "ddp" in out:
        out["within_spread"] = {
            m: abs(out["feedline"][m]["median"] - out["ddp"][m]["median"])
            <= max(out[c][m]["max"] - out[c][m]["min"] for c in ("feedline", "ddp"))
            for m in judged}
    return out


def report(job: str, epochs: int, rows: list[dict[str, Any]], summary: dict[str, Any],
           label: str) -> str:
    lines = [f"## {job} ({epochs} epochs){' — ' + label if label else ''}", "",
             NOTES[job], "",
             "| contender | seed | final train loss | val accuracy | wall (s) |",
             "|---|---|---|---|---|"]
    for r in sorted(rows, key=lambda r: (r["contender"], r["seed"])):
        lines.append(f"| {r['contender']} | {r['seed']} | {r['train_loss']:.4f} | "
                     f"{r['val_accuracy']:.4f} | {r['wall_s']:.1f} |")
    lines += ["", "| contender | loss median (min–max) | accuracy median (min–max) |",
              "|---|---|---|"]
    for name in ("feedline", "ddp"):
        if name in summary:
            s = summary[name]
            lines.append(f"| {name} | {s['train_loss']['median']:.4f} "
                         f"({s['train_loss']['min']:.4f}–{s['train_loss']['max']:.4f}) | "
                         f"{s['val_accuracy']['median']:.4f} ({s['val_accuracy']['min']:.4f}–"
                         f"{s['val_accuracy']['max']:.4f}) |")
    if "within_spread" in summary:
        lines += ["", "Feedline within the seeds' spread of DDP: " + ", ".join(
            f"{m} {'yes' if ok else 'NO'}" for m, ok in summary["within_spread"].items())]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--job", choices=sorted(JOBS), default="quickstart")
    parser.add_argument("--epochs", type=int, default=0, help="0: the config's")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--set", action="append", default=[], help="more config overrides")
    parser.add_argument("--contenders", nargs="+", default=["feedline", "ddp"])
    parser.add_argument("--checkout", type=Path, default=REPO,
                        help="the Feedline checkout whose pipeline run is measured")
    parser.add_argument("--label", default="", help="named in the report (e.g. 'before')")
    parser.add_argument("--save", metavar="NAME", nargs="?", const="", default=None,
                        help="write benchmarks/results/parity-<job>[-NAME]-<date>.{json,md}")
    args = parser.parse_args(argv)
    config, sets = JOBS[args.job]
    from pipeline.config import load_config

    sets = [*sets, *args.set]
    epochs = args.epochs or load_config(config, sets).train.epochs
    sets.append(f"train.epochs={epochs}")
    if args.job == "train":  # the images pipeline bench train writes once
        from pipeline.bench.train import TrainBenchConfig
        from pipeline.data.synthetic import write_synthetic

        bench = TrainBenchConfig()
        folder = write_synthetic(bench.cache_dir, count=bench.samples, size=bench.source_size,
                                 fmt="jpeg", classes=bench.classes)
        sets.append(f"data.source.path={folder}")
    rows = []
    for i, seed in enumerate(args.seeds):
        order = args.contenders[i % len(args.contenders):] + args.contenders[
            :i % len(args.contenders)]  # rotate
        for name in order:
            run = (feedline(config, sets, seed, args.checkout.resolve()) if name == "feedline"
                   else ddp(config, sets, seed, epochs))
            rows.append({"contender": name, "seed": seed, **run})
            print(f"{name} seed {seed}: loss {run['train_loss']:.4f}, "
                  f"accuracy {run['val_accuracy']:.4f}, {run['wall_s']:.1f} s", flush=True)
    summary = summarise(rows, JUDGED[args.job])
    text = report(args.job, epochs, rows, summary, args.label)
    print(text)
    if args.save is not None:
        stem = "-".join(p for p in ("parity", args.job, args.save, time.strftime("%Y-%m-%d")) if p)
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / f"{stem}.json").write_text(json.dumps(
            {"job": args.job, "epochs": epochs, "sets": sets, "label": args.label,
             "checkout": str(args.checkout), "rows": rows, "summary": summary}, indent=1))
        (RESULTS / f"{stem}.md").write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
