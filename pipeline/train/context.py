"""What a task's set-up methods get: a small context, not the whole run config (Train worker;
picklable; no Ray).

    model = task.build_model(ctx)                       # ctx.input_shape, ctx.num_classes
    optimizer = task.configure_optimizer(model, ctx)    # ctx.train: the run's train section
    scheduler = task.configure_scheduler(optimizer, ctx)  # ctx.total_steps: estimated

Tasks written for the old signatures (``build_model(*, input_shape, num_classes, config)``,
``configure_optimizer(model, config)``, ``configure_scheduler(optimizer, config,
total_steps)``, ``config`` the whole :class:`~pipeline.config.Config`) keep working for this
release: the loop calls them the old way, and the driver warns once per method with the new
signature (:func:`legacy_methods`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TaskContext:
    """The run as a task sees it: the shapes the data stage found and the ``train`` section."""

    input_shape: tuple[int, ...]  # one sample's model input: (C, H, W) images, (F,) features
    num_classes: int  # 0 when the data has no classes (a language model's tokens)
    train: Any  # the run's TrainConfig: lr, weight_decay, optimizer, model, epochs, ...
    total_steps: int = 0  # the run's optimizer steps, estimated (for schedules)


#: method → (the parameter only its old signature has, the old and the new signature)
LEGACY = {
    "build_model": ("input_shape", "build_model(self, *, input_shape, num_classes, config)",
                    "build_model(self, ctx)"),
    "configure_optimizer": ("config", "configure_optimizer(self, model, config)",
                            "configure_optimizer(self, model, ctx)"),
    "configure_scheduler": ("total_steps", "configure_scheduler(self, optimizer, config, "
                                           "total_steps)",
                            "configure_scheduler(self, optimizer, ctx)"),
}


def _legacy(task: Any, method: str) -> bool:
    try:
        params = inspect.signature(getattr(task, method)).parameters
    except (TypeError, ValueError):  # a builtin or C callable: call it the new way
        return False
    return LEGACY[method][0] in params


def legacy_methods(task: Any, name: str) -> list[str]:
    """One line per method of ``task`` (called ``name``) written for an old signature, for the
    driver's console."""
    return [f"{name}.{old} is deprecated: write {new} (ctx.input_shape, "
            f"ctx.num_classes, ctx.train, ctx.total_steps); the old one works this release"
            for method, (_, old, new) in LEGACY.items() if _legacy(task, method)]


def build_model(task: Any, ctx: TaskContext, config: Any) -> Any:
    """``task.build_model`` called the way it was written (``config``: the whole run config,
    for an old signature)."""
    if _legacy(task, "build_model"):
        return task.build_model(input_shape=ctx.input_shape, num_classes=ctx.num_classes,
                                config=config)
    return task.build_model(ctx)


def configure_optimizer(task: Any, model: Any, ctx: TaskContext, config: Any) -> Any:
    return task.configure_optimizer(model, config if _legacy(task, "configure_optimizer")
                                    else ctx)


def configure_scheduler(task: Any, optimizer: Any, ctx: TaskContext, config: Any) -> Any:
    if _legacy(task, "configure_scheduler"):
        return task.configure_scheduler(optimizer, config, ctx.total_steps)
    return task.configure_scheduler(optimizer, ctx)
