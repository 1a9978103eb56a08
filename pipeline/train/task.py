"""Tasks: what a run trains, as a small object the loop calls (Train worker; no Ray).

The loop (:mod:`pipeline.train.loop`) owns everything around the math: the device, the DDP
wrapper, ``backward()``, gradient accumulation and clipping, the optimizer and schedule steps,
the profile's spans, the ids each rank trained (exactly-once), checkpoints and resume. A task
owns the math, and the loop calls it like this::

    model = task.build_model(ctx)       # per worker; ctx: input_shape, num_classes, train section
    optimizer = task.configure_optimizer(model, ctx)
    scheduler = task.configure_scheduler(optimizer, ctx)   # None: constant; ctx.total_steps
    for batch in shard:     # device tensors: "image" (N,C,H,W) or "features" (N,F), "label", "id"
        loss = task.loss(ddp_model, batch)                # under autocast with train.precision
        loss.backward(); clip; optimizer.step(); scheduler.step()        # the loop, not the task
        samples += task.batch_size(batch)
    for batch in val_shard:                               # no_grad, model.eval()
        sums += task.eval_counts(model, batch)            # summed over batches, then ranks
    metrics = task.eval_metrics(sums)                     # {"val_accuracy": ..., ...}

A task is any object with these methods: subclass :class:`Task` (or :class:`ClassificationTask`
to change one part of today's behaviour), or write a class with ``build_model`` and ``loss`` and
get :class:`Task`'s defaults for the rest. ``train.task`` names one in YAML
(``'package.module:ClassName'``); ``pipeline.run(cfg, task=MyTask())`` hands one over in Python.
A task travels to every Train worker by pickle, so build models and tensors in its methods, not
in ``__init__``.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any

from pipeline.config.callables import load_callable
from pipeline.train.context import TaskContext

if TYPE_CHECKING:  # torch is imported where a task runs (a Train worker), not to resolve one
    import torch
    from torch import nn

REQUIRED = ("build_model", "loss")
OPTIONAL = ("configure_optimizer", "configure_scheduler", "eval_counts", "eval_metrics",
            "batch_size")


class Task:
    """The task protocol, with defaults for everything but the model and the loss.

    Runs in every Train worker (and is resolved once on the driver); must be picklable.
    ``ctx`` is a :class:`~pipeline.train.context.TaskContext` (the input shape, the classes, the
    run's ``train`` section, the estimated optimizer steps); ``batch`` is a dict of device
    tensors keyed as the data stage names them: ``"image"`` (N, C, H, W; channels-last and
    augmented when ``data.augment`` is on) or ``"features"`` (N, F), ``"label"`` (N,) and ``"id"``
    (N,), the samples' stable ids.
    """

    def build_model(self, ctx: TaskContext) -> nn.Module:
        """The model, on the CPU; the loop moves it to the device and wraps it in DDP."""
        raise NotImplementedError(f"{type(self).__qualname__} must define build_model")

    def configure_optimizer(self, model: nn.Module, ctx: TaskContext) -> torch.optim.Optimizer:
        """The optimizer of ``model``'s parameters (the unwrapped model: names without
        ``module.``). Default: ``train.optimizer`` with ``train.lr`` and ``train.weight_decay``."""
        return default_optimizer(model, ctx.train)

    def configure_scheduler(self, optimizer: torch.optim.Optimizer, ctx: TaskContext) -> Any:
        """A learning-rate scheduler stepped after every optimizer step, or None
        (``ctx.total_steps`` estimates the run's optimizer steps). Default:
        ``train.lr_schedule``."""
        return default_scheduler(optimizer, ctx.train, ctx.total_steps)

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of one batch, a scalar; ``model`` is the DDP-wrapped model, so call
        it (its forward) exactly once per batch."""
        raise NotImplementedError(f"{type(self).__qualname__} must define loss")

    def eval_counts(self, model: nn.Module,
                    batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Scalar tensors for one validation batch (e.g. correct and total); the loop sums them
        over batches on the device and over ranks. Default: nothing to evaluate."""
        return {}

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        """The epoch's validation metrics from the summed counts; name them ``val_*`` (they go to
        ``metrics.jsonl``, the epoch line and ``summary.json``). Default: none."""
        return {}

    def batch_size(self, batch: dict[str, torch.Tensor]) -> int:
        """Samples in ``batch``, for throughput and progress. Default: ``len(batch["id"])``."""
        return len(batch["id"])


def inputs(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The model's input in a batch: the ``image`` field, or ``features`` for table data."""
    return batch["image"] if "image" in batch else batch["features"]


class ClassificationTask(Task):
    """The built-in task: ``train.model`` (channels-last for images), cross-entropy on the
    labels, accuracy of the argmax."""

    def build_model(self, ctx: TaskContext | None = None, **old: Any) -> nn.Module:
        # ``old``: input_shape, num_classes, config, as a subclass written for the old
        # signature calls super().build_model (this release only)
        import torch

        from pipeline.train.models import build_model

        ctx = ctx or TaskContext(input_shape=old["input_shape"], num_classes=old["num_classes"],
                                 train=old["config"].train)
        input_shape = ctx.input_shape
        model = build_model(ctx.train.model, input_shape=input_shape,
                            num_classes=ctx.num_classes)
        if len(input_shape) == 3:  # images: convolutions run channels-last (epoch.layout)
            model = model.to(memory_format=torch.channels_last)
        return model

    def loss(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        from torch.nn.functional import cross_entropy

        return cross_entropy(model(inputs(batch)), batch["label"])

    def eval_counts(self, model: nn.Module,
                    batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        y = batch["label"]
        return {"correct": (model(inputs(batch)).argmax(dim=1) == y).sum(),
                "total": y.new_full((), len(y))}  # made on the device: no copy, no sync

    def eval_metrics(self, totals: dict[str, float]) -> dict[str, float]:
        total = totals.get("total", 0.0)
        if not total:
            return {}
        return {"val_accuracy": totals["correct"] / total, "val_samples": int(total)}


# The built-in tasks by name; pipeline.train.config.BUILTIN_TASKS lists the same names.
TASKS: dict[str, type[Task]] = {"classification": ClassificationTask}


def default_optimizer(model: nn.Module, train: Any) -> torch.optim.Optimizer:
    """``train.optimizer`` (SGD with momentum 0.9, or AdamW) with ``train.lr`` and
    ``train.weight_decay``."""
    import torch

    params = [p for p in model.parameters() if p.requires_grad]
    if train.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=train.lr, weight_decay=train.weight_decay)
    return torch.optim.SGD(params, lr=train.lr, momentum=0.9, weight_decay=train.weight_decay)


def default_scheduler(optimizer: torch.optim.Optimizer, train: Any, total_steps: int) -> Any:
    """``train.lr_schedule``: None for constant; cosine from ``train.lr`` down to 0 over
    ``total_steps`` optimizer steps, held at 0 past them (the step count is an estimate)."""
    if train.lr_schedule == "constant":
        return None
    import torch

    # a partial, not an object with state: a resumed run keeps its own config's total steps
    return torch.optim.lr_scheduler.LambdaLR(optimizer,
                                             functools.partial(cosine, total=max(1, total_steps)))


def cosine(step: int, *, total: int) -> float:
    """The cosine schedule's factor of ``train.lr`` at optimizer step ``step`` of ``total``."""
    return 0.5 * (1.0 + math.cos(math.pi * min(step, total) / total))


def resolve_task(task: Any, field: str = "train.task") -> Task:
    """A :class:`Task` from ``train.task`` (a built-in name or ``'module:ClassName'``, called
    without arguments) or from an object the caller built; errors name ``field`` and the remedy."""
    if isinstance(task, _DuckTask):  # resolved before
        return task
    if isinstance(task, str):
        spec = task
        if spec in TASKS:
            return TASKS[spec]()
        if ":" not in spec:
            raise ValueError(f"{field} ({spec!r}) is not a built-in task ({', '.join(TASKS)}) "
                             f"nor 'package.module:ClassName'")
        factory = load_callable(spec, field)
        try:
            task = factory()
        except TypeError as exc:
            raise TypeError(f"{field} ({spec!r}) must be callable without arguments (a task "
                            f"class, or a factory returning a task): {exc}") from exc
        where = f"{field} ({spec!r}: a {type(task).__qualname__})"
    elif isinstance(task, type):
        raise TypeError(f"task ({task.__qualname__}) is a class; pass an instance: "
                        f"task={task.__qualname__}()")
    else:
        where = f"task ({type(task).__qualname__})"
    missing = [name for name in REQUIRED if not callable(getattr(task, name, None))
               or getattr(type(task), name, None) is getattr(Task, name)]  # Task's own: abstract
    if missing:
        raise TypeError(f"{where} has no {' nor '.join(missing)}; subclass pipeline.Task (or "
                        f"pipeline.ClassificationTask) and define them")
    return task if isinstance(task, Task) else _DuckTask(task)


def task_name(task: Any) -> str:
    """``classification`` for the built-in task, else the class's ``module.QualifiedName``."""
    cls = type(task.inner if isinstance(task, _DuckTask) else task)
    for name, builtin in TASKS.items():
        if cls is builtin:
            return name
    return f"{cls.__module__}.{cls.__qualname__}"


def task_setting(task: Any) -> str | None:
    """``train.task`` that rebuilds a task given in Python (``'module:Class'``), for a resume
    command: None when its class cannot be imported by that name or needs arguments (the
    resume must then pass the same object again)."""
    import importlib
    import inspect

    cls = type(task.inner if isinstance(task, _DuckTask) else task)
    name = task_name(task)
    if name in TASKS:
        return name
    try:
        found = getattr(importlib.import_module(cls.__module__), cls.__qualname__, None)
        inspect.signature(cls).bind()
    except (ImportError, TypeError, ValueError):
        return None
    return f"{cls.__module__}:{cls.__qualname__}" if found is cls else None


class _DuckTask(Task):
    """A task that does not subclass :class:`Task`: its own methods, Task's defaults for the
    rest (an instance attribute shadows the class's method). Pickles with the object it wraps."""

    def __init__(self, inner: Any):
        self.inner = inner
        for name in (*REQUIRED, *OPTIONAL):
            own = getattr(inner, name, None)
            if callable(own):
                setattr(self, name, own)
