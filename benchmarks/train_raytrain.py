"""Baseline (b) of ``pipeline bench train``: the same job hand-written on Ray Train + Ray Data.

Follows Ray 2.60's documentation the way a user would, with the one-line tuning Feedline's own
run gets: a local Ray with the same logical CPUs (dashboard off, as an expert does for a batch
job), ``ray.data.read_images(size=..., mode="RGB")`` over the ImageFolder with the class taken
from the directory (``Partitioning("dir")``) and files shuffled once (``shuffle="files"``), a
tiny ``map_batches`` that turns class names into integers, ``TorchTrainer`` with the same
workers and CPUs per worker, ``get_dataset_shard("train").iter_torch_batches(prefetch_batches=2)``
and ``prepare_model``. Images stay uint8 through Ray Data and are normalised in the worker, as
Feedline does. Same model (a copy of Feedline's ``cnn``, so no Feedline import), SGD with
momentum 0.9, a checkpoint reported every epoch from rank 0, no validation.

Prints one line ``BENCH_RESULT {json}`` (final epoch's mean train loss, samples, timing marks)::

    python benchmarks/train_raytrain.py --data ROOT --epochs 3 --num-cpus 2
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
import ray.train
import ray.train.torch
import torch
import torch.distributed as dist
from ray.data.datasource.partitioning import Partitioning
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer, prepare_model
from torch import nn

_IMPORTED = time.time()


def _since_spawn() -> float:
    """Seconds since the harness spawned this process (its clock), or since imports ended."""
    return time.time() - float(os.environ.get("FEEDLINE_BENCH_T0", _IMPORTED))


def small_cnn(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A copy of ``pipeline.train.models.small_cnn`` (a test checks that they stay identical)."""
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (height // 4) * (width // 4), 64), nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def build(name: str, *, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The job's model: the cnn copy, or torchvision's ResNet-18 as ``train.model: resnet18``."""
    if name == "resnet18":
        from torchvision.models import resnet18

        return resnet18(num_classes=num_classes)
    return small_cnn(input_shape=input_shape, num_classes=num_classes)


def train_func(config: dict) -> None:
    """Runs in every Ray Train worker."""
    torch.set_num_threads(1)  # Feedline sets int(cpus_per_worker) threads, at least 1
    torch.manual_seed(config["seed"])
    height, width = config["image_size"]
    device = ray.train.torch.get_device()
    cuda = device.type == "cuda"
    model = build(config["model"], input_shape=(3, height, width),
                  num_classes=config["num_classes"])
    if cuda:  # what an expert adds in a line on a GPU: channels-last convolutions
        model = model.to(memory_format=torch.channels_last)
    model = prepare_model(model)  # to the worker's device, DDP-wrapped
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    mean = torch.tensor(config["mean"], device=device).view(1, -1, 1, 1)
    std = torch.tensor(config["std"], device=device).view(1, -1, 1, 1)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=config["precision"] == "bf16")
    rank = ray.train.get_context().get_world_rank()
    shard = ray.train.get_dataset_shard("train")
    first_step, samples_all = None, 0
    for epoch in range(config["epochs"]):
        loss_sum, steps, samples = torch.zeros((), device=device), 0, 0
        for batch in shard.iter_torch_batches(batch_size=config["batch_size"],
                                              prefetch_batches=2, pin_memory=cuda):
            if first_step is None:
                first_step = _since_spawn()
            # N×H×W×C uint8 → N×C×H×W float, normalised here (as Feedline does on the device)
            x = (batch["image"].permute(0, 3, 1, 2).float().div_(255) - mean) / std
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast:
                loss = loss_fn(model(x), batch["label"])
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            steps += 1
            samples += len(x)
        totals = torch.tensor([samples, float(loss_sum), steps], dtype=torch.float64,
                              device=device)
        dist.all_reduce(totals)
        totals = totals.cpu()
        samples_all += int(totals[0])
        metrics = {"epoch": epoch + 1, "samples": samples_all,
                   "train_loss": float(totals[1] / max(totals[2], 1)), "first_step": first_step}
        with tempfile.TemporaryDirectory() as tmp:
            checkpoint = None
            if rank == 0:
                # prepare_model wraps in DDP only with several workers
                torch.save({"model": getattr(model, "module", model).state_dict(),
                            "optimizer": optimizer.state_dict(), "epoch": epoch + 1},
                           os.path.join(tmp, "checkpoint.pt"))
                checkpoint = Checkpoint.from_directory(tmp)
            ray.train.report(metrics, checkpoint=checkpoint)


def add_label(batch: dict[str, np.ndarray], classes: list[str]) -> dict[str, np.ndarray]:
    """Class name (from the directory) → integer label."""
    index = {name: i for i, name in enumerate(classes)}
    return {"image": batch["image"],
            "label": np.asarray([index[name] for name in batch["class"]], dtype=np.int64)}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ImageFolder root of JPEGs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per worker")
    parser.add_argument("--image-size", type=int, nargs=2, default=[128, 128], metavar=("H", "W"))
    parser.add_argument("--mean", type=float, nargs=3, default=[0.485, 0.456, 0.406])
    parser.add_argument("--std", type=float, nargs=3, default=[0.229, 0.224, 0.225])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="Ray Train workers")
    parser.add_argument("--cpus-per-worker", type=float, default=0.5)
    parser.add_argument("--num-cpus", type=int, default=0,
                        help="logical CPUs of the local Ray (0: this machine's core count)")
    parser.add_argument("--output", default="runs/train-raytrain", help="Ray Train storage")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: one GPU per Ray Train worker (use_gpu)")
    parser.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    marks = {"imports_done": _since_spawn()}
    ray.init(address="local", num_cpus=args.num_cpus or os.cpu_count(), include_dashboard=False)
    marks["ray_started"] = _since_spawn()
    root = str(Path(args.data).resolve())
    classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
    ds = ray.data.read_images(root, size=tuple(args.image_size), mode="RGB", shuffle="files",
                              partitioning=Partitioning("dir", field_names=["class"],
                                                        base_dir=root))
    ds = ds.map_batches(add_label, fn_kwargs={"classes": classes})
    trainer = TorchTrainer(
        train_func,
        train_loop_config={"epochs": args.epochs, "batch_size": args.batch_size, "lr": args.lr,
                           "seed": args.seed, "image_size": args.image_size,
                           "num_classes": len(classes), "mean": args.mean, "std": args.std,
                           "model": args.model, "precision": args.precision},
        scaling_config=ScalingConfig(num_workers=args.workers, use_gpu=args.device == "cuda",
                                     resources_per_worker={"CPU": args.cpus_per_worker}),
        run_config=RunConfig(name="train", storage_path=str(Path(args.output).resolve())),
        datasets={"train": ds},
    )
    result = trainer.fit()
    marks["fit_done"] = _since_spawn()
    ray.shutdown()
    marks["ray_stopped"] = _since_spawn()
    final = result.metrics or {}
    marks |= {"first_step": final.get("first_step"), "train_loss": final.get("train_loss"),
              "samples": final.get("samples"), "exit": _since_spawn()}
    print("BENCH_RESULT " + json.dumps(marks), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
