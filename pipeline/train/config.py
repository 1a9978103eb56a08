"""Config of the training stage: workers, model and optimisation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pipeline.config.options import option
from pipeline.config.placement import PlacementConfig


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """Ray Train workers and what each of them trains."""

    num_workers: int = option(2, "Ray Train workers (one process group rank each)", ge=1)
    use_gpu: bool | Literal["auto"] = option("auto", "one GPU per worker: auto uses GPUs when the "
                                                     "cluster has them")
    cpus_per_worker: float = option(1.0, "CPUs each Train worker reserves; the rest of the "
                                         "cluster is left to preprocessing", gt=0)
    placement: PlacementConfig = field(default_factory=PlacementConfig, metadata={
        "doc": "nodes the Train workers run on (GPU nodes)"})
    model: str = option("cnn", "built-in model (cnn, mlp) or 'module:factory' returning an "
                               "nn.Module; called with input_shape=..., num_classes=...")
    epochs: int = option(5, "passes over the training split", ge=1)
    batch_size: int = option(64, "samples per step on each worker", ge=1)
    lr: float = option(0.01, "learning rate (SGD with momentum 0.9)", gt=0)
    seed: int = option(0, "seed of model initialisation")
    max_failures: int = option(0, "worker-group restarts Ray Train may make; a restart resumes "
                                  "from the last checkpoint, mid-epoch", ge=0)
    checkpoint_every: int = option(0, "also checkpoint every N steps inside an epoch (0: at "
                                      "epoch ends only)", ge=0)
    keep_checkpoints: int = option(2, "checkpoints kept under RUN_DIR/ray/train (the newest)",
                                   ge=1)
    resume_from: str = option("", "checkpoint folder to start from (RUN_DIR/checkpoint or one "
                                  "under RUN_DIR/ray/train): resumes at its epoch and step")
    deterministic: bool = option(False, "same seed and worker count → the same batches on every "
                                        "rank and the same weights, across restarts too (Ray "
                                        "Data keeps block order; costs some throughput)")

    def check(self) -> list[str]:
        if self.resume_from and not (Path(self.resume_from) / "model.pt").is_file():
            return [f"resume_from ({self.resume_from!r}) is not a checkpoint folder (no model.pt); "
                    f"give RUN_DIR/checkpoint or a folder under RUN_DIR/ray/train"]
        return []
