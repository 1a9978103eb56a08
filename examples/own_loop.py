"""Your own Ray Train loop on Feedline's batches: ``python examples/own_loop.py [--epochs 3]``.

A hand-written ``train_loop_per_worker`` (Ray Train's ``prepare_model`` for DDP, plain SGD,
cross-entropy, accuracy) where ``get_dataset_shard(...).iter_torch_batches()`` would be, uses
``pipeline.batches``: the quickstart's digits decoded by Feedline's readers on Ray Data actors,
normalised on the device, prefetched. Each rank writes the ids it trained per epoch; the driver
checks with ``feed.account`` that every epoch saw every sample exactly once, and prints a table.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import pipeline

QUICKSTART = Path(__file__).resolve().parent / "quickstart.yaml"


def train_loop(config: dict) -> None:
    import ray.train
    from ray.train.torch import prepare_model

    from pipeline.train.models import small_cnn

    feed, epochs, ids_dir = config["feed"], config["epochs"], Path(config["ids_dir"])
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = prepare_model(small_cnn(input_shape=config["shape"], num_classes=config["classes"]))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(epochs):
        seen, loss = [], torch.zeros(())
        with pipeline.batches(feed, "train", epoch=epoch) as batches:
            for batch in batches:
                loss = F.cross_entropy(model(batch["image"]), batch["label"])
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                seen.append(batch["id"].cpu().numpy())
            waited = batches.stats.consumer_wait_s
        correct = total = 0
        model.eval()
        with torch.no_grad(), pipeline.batches(feed, "val", epoch=epoch) as batches:
            for batch in batches:
                correct += int((model(batch["image"]).argmax(1) == batch["label"]).sum())
                total += len(batch["label"])
        model.train()
        # a folder on this machine: on a cluster, use storage every node can write
        np.save(ids_dir / f"e{epoch + 1}_rank{rank}.npy", np.concatenate(seen))
        ray.train.report({"epoch": epoch + 1, "loss": float(loss), "data_wait_s": waited,
                          "val_accuracy": correct / max(total, 1)})


def main(epochs: int = 3, output: str | None = None) -> list[dict]:
    """Train; per epoch, the accounting of the ids every rank trained."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    output = Path(output or tempfile.mkdtemp(prefix="own-loop-"))
    ids_dir = output / "ids"
    ids_dir.mkdir(parents=True, exist_ok=True)
    if not ray.is_initialized():
        ray.init(num_cpus=4, include_dashboard=False)  # Train workers and decoding share them
    feed = pipeline.prepare(QUICKSTART)
    trainer = TorchTrainer(
        train_loop,
        train_loop_config={"feed": feed.spec, "epochs": epochs, "ids_dir": str(ids_dir),
                           "shape": feed.sample_shape, "classes": len(feed.classes)},
        datasets=feed.datasets, dataset_config=feed.dataset_config,
        scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"CPU": 0.5}),
        run_config=RunConfig(storage_path=str(output), name="own-loop"))
    trainer.fit()
    return [feed.account([np.load(p) for p in sorted(ids_dir.glob(f"e{e}_rank*.npy"))])
            | {"epoch": e} for e in range(1, epochs + 1)]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--output", help="folder for Ray Train's results and the ids")
    args = parser.parse_args()
    print("| epoch | expected | unique | lost | duplicated | quarantined |")
    print("|---:|---:|---:|---:|---:|---:|")
    for row in main(args.epochs, args.output):
        print(f"| {row['epoch']} | {row['expected']} | {row['unique']} | {row['lost']} "
              f"| {row['duplicated']} | {row['quarantined']} |")
