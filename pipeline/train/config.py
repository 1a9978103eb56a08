"""Config of the training stage: workers, the task, model and optimisation."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pipeline.config.options import option
from pipeline.config.placement import PlacementConfig

# The built-in tasks (pipeline.train.task.TASKS; named here so loading a config needs no torch).
BUILTIN_TASKS = ("classification",)


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
    task: str = option("classification", "what the run trains: classification (train.model, "
                                         "cross-entropy, accuracy) or 'package.module:ClassName' "
                                         "of a pipeline.Task (see docs/guide.md); a task given "
                                         "to pipeline.run(task=...) replaces it")
    model: str = option("cnn", "built-in model (cnn, mlp, resnet18: torchvision's) or "
                               "'module:factory' returning an nn.Module; called with "
                               "input_shape=..., num_classes=...")
    epochs: int = option(5, "passes over the training split", ge=1)
    batch_size: int = option(64, "samples per step on each worker", ge=1)
    optimizer: Literal["sgd", "adamw"] = option("sgd", "sgd (momentum 0.9) or adamw; a task's "
                                                       "configure_optimizer may choose another")
    lr: float = option(0.01, "learning rate (the peak one under a schedule)", gt=0)
    weight_decay: float = option(0.0, "decoupled for adamw (0.01-0.1 is usual), L2 for sgd",
                                 ge=0)
    lr_schedule: Literal["constant", "cosine"] = option(
        "constant", "cosine: from train.lr down to 0 per optimizer step over all steps of all "
                    "epochs (estimated from the training split's size)")
    precision: Literal["fp32", "bf16"] = option(
        "fp32", "bf16: the forward and the loss under torch.autocast(bfloat16) on CPU and CUDA; "
                "weights, gradients and optimizer state stay fp32")
    grad_accum_steps: int = option(1, "batches whose gradients add up to one optimizer step "
                                      "(each rank's step covers batch_size x this); with DDP only "
                                      "the last one all-reduces", ge=1)
    grad_clip_norm: float = option(0.0, "clip the gradients' total L2 norm to this before each "
                                        "optimizer step; 0 turns clipping off", ge=0)
    seed: int = option(0, "seed of model initialisation")
    max_nonfinite_steps: int = option(0, "steps whose loss may be NaN or infinite before the "
                                         "run stops as diverged (a NaN step already spoils the "
                                         "weights: the last good checkpoint is kept)", ge=0)
    max_failures: int = option(0, "worker-group restarts Ray Train may make; a restart resumes "
                                  "from the last checkpoint, mid-epoch", ge=0)
    checkpoint_every: int = option(0, "also checkpoint every N optimizer steps inside an epoch "
                                      "(0: at epoch ends only)", ge=0)
    keep_checkpoints: int = option(2, "checkpoints kept under RUN_DIR/ray/train (the newest)",
                                   ge=1)
    resume_from: str = option("", "checkpoint folder to start from (RUN_DIR/checkpoint or one "
                                  "under RUN_DIR/ray/train): resumes at its epoch and step")
    deterministic: bool = option(False, "same seed and worker count → the same batches on every "
                                        "rank and the same weights, across restarts too (Ray "
                                        "Data keeps block order; costs some throughput)")

    def check(self) -> list[str]:
        errors = []
        module, sep, attr = self.task.partition(":")
        if self.task not in BUILTIN_TASKS and not (sep and module and attr):
            errors.append(f"task ({self.task!r}) is not a built-in task "
                          f"({', '.join(BUILTIN_TASKS)}) nor 'package.module:ClassName'; name a "
                          f"pipeline.Task subclass importable on every node")
        if self.resume_from and not (Path(self.resume_from) / "model.pt").is_file():
            errors.append(f"resume_from ({self.resume_from!r}) is not a checkpoint folder (no "
                          f"model.pt); give RUN_DIR/checkpoint or a folder under RUN_DIR/ray/train")
        return errors
