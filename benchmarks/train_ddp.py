"""Baseline (c) of ``pipeline bench train``: the same job in plain torch DDP, no Ray, no Feedline.

What an expert writes for an ImageFolder of JPEGs on a CPU machine: ``torch.multiprocessing``
spawns one process per rank (what ``torchrun`` would do), gloo process group, a map-style
dataset that decodes each file with PIL (RGB, bilinear resize, uint8 CHW; torchvision-free, the
same decode Feedline's readers and ``ray.data.read_images`` do), ``DistributedSampler`` and a
``DataLoader`` tuned in a line (``num_workers``, ``persistent_workers``, ``prefetch_factor``).
Batches travel as uint8 and are normalised in the training process, as Feedline does. Same
model (a copy of Feedline's ``cnn``, so no Feedline import), SGD with momentum 0.9, a
checkpoint per epoch from rank 0, no validation.

Prints one line ``BENCH_RESULT {json}`` (final epoch's mean train loss, samples, timing marks)::

    python benchmarks/train_ddp.py --data ROOT --epochs 3
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

EXTENSIONS = (".jpg", ".jpeg", ".png")


_IMPORTED = time.time()


def _since_spawn() -> float:
    """Seconds since the harness spawned this process (its clock), or since import."""
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


class JpegFolder(Dataset):
    """ROOT/<class>/<file>: decoded with PIL to uint8 C×H×W; picklable to loader workers."""

    def __init__(self, root: str, size: tuple[int, int]):
        self.classes = sorted(p.name for p in Path(root).iterdir() if p.is_dir())
        self.files = [(str(f), label) for label, name in enumerate(self.classes)
                      for f in sorted((Path(root) / name).iterdir())
                      if f.suffix.lower() in EXTENSIONS]
        self.size = size

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path, label = self.files[index]
        height, width = self.size
        with Image.open(path) as img:
            img = img.convert("RGB")
            if img.size != (width, height):
                img = img.resize((width, height), Image.Resampling.BILINEAR)
            pixels = np.asarray(img, dtype=np.uint8)
        return torch.from_numpy(pixels.transpose(2, 0, 1).copy()), label


def worker(rank: int, args: argparse.Namespace, port: int, marks: dict) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    cuda = args.device == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=args.workers)
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.set_num_threads(1)  # ranks share the cores with the loader workers
    torch.manual_seed(args.seed)
    data = JpegFolder(args.data, tuple(args.image_size))
    sampler = DistributedSampler(data, shuffle=True, seed=args.seed)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                        num_workers=args.loader_workers, pin_memory=cuda,
                        persistent_workers=args.loader_workers > 0,
                        prefetch_factor=2 if args.loader_workers > 0 else None)
    model = build(args.model, input_shape=(3, *args.image_size), num_classes=len(data.classes))
    # on a GPU, what an expert adds in a line: channels-last convolutions
    model = model.to(device, memory_format=torch.channels_last) if cuda else model
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    mean = torch.tensor(args.mean, device=device).view(1, -1, 1, 1)
    std = torch.tensor(args.std, device=device).view(1, -1, 1, 1)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")
    out = Path(args.output)
    marks["setup_done"] = _since_spawn()
    totals = torch.zeros(3, dtype=torch.float64)  # samples, loss sum, steps (last epoch)
    samples_all = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        loss_sum, steps, samples = torch.zeros((), device=device), 0, 0
        for images, labels in loader:
            if "first_step" not in marks:
                marks["first_step"] = _since_spawn()
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            x = (images.float().div_(255) - mean) / std
            if cuda:
                x = x.contiguous(memory_format=torch.channels_last)
            with autocast:
                loss = loss_fn(ddp(x), labels)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            loss_sum += loss.detach()
            steps += 1
            samples += len(labels)
        totals = torch.tensor([samples, float(loss_sum), steps], dtype=torch.float64,
                              device=device)
        dist.all_reduce(totals)
        totals = totals.cpu()
        samples_all += int(totals[0])
        if rank == 0:
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch + 1}, out / "checkpoint.pt")
            print(f"epoch {epoch + 1}: train_loss {totals[1] / totals[2]:.4f}", flush=True)
    marks["train_done"] = _since_spawn()
    if rank == 0:
        marks.update(train_loss=float(totals[1] / max(totals[2], 1)), samples=samples_all)
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True, help="ImageFolder root of JPEGs")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64, help="per rank")
    parser.add_argument("--image-size", type=int, nargs=2, default=[128, 128], metavar=("H", "W"))
    parser.add_argument("--mean", type=float, nargs=3, default=[0.485, 0.456, 0.406])
    parser.add_argument("--std", type=float, nargs=3, default=[0.229, 0.224, 0.225])
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=2, help="training processes (ranks)")
    parser.add_argument("--loader-workers", type=int, default=1,
                        help="DataLoader decode processes per rank")
    parser.add_argument("--output", default="runs/train-ddp", help="checkpoint folder")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                        help="cuda: NCCL, one GPU per rank, pinned loader memory, channels-last")
    parser.add_argument("--model", choices=("cnn", "resnet18"), default="cnn")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    Path(args.output).mkdir(parents=True, exist_ok=True)
    # rank 0 writes its marks to a file: a Manager would add a process to the job
    marks_file = Path(args.output) / "marks.json"
    marks = {"imports_done": _IMPORTED - float(os.environ.get("FEEDLINE_BENCH_T0", _IMPORTED))}
    mp.spawn(_rank_main, args=(args, _free_port(), str(marks_file)), nprocs=args.workers,
             join=True)
    marks |= json.loads(marks_file.read_text())
    marks["exit"] = _since_spawn()
    print("BENCH_RESULT " + json.dumps(marks), flush=True)
    return 0


def _rank_main(rank: int, args: argparse.Namespace, port: int, marks_file: str) -> None:
    marks: dict = {"spawned": _since_spawn()}
    worker(rank, args, port, marks)
    if rank == 0:
        Path(marks_file).write_text(json.dumps(marks))


if __name__ == "__main__":
    raise SystemExit(main())
