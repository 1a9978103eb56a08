"""The validation pass on one rank and the ranks' sum of its counts (Train worker; no Ray), and
the memory layout every batch gets before the task sees it."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch

from pipeline.train.ranks import Ranks
from pipeline.train.step import Stepper
from pipeline.train.task import Task, task_name


def evaluate(stepper: Stepper, feeder: Iterable[dict[str, torch.Tensor]],
             field: str) -> dict[str, torch.Tensor]:
    """The task's validation counts over this rank's batches, summed on the device (no sync
    per batch); :func:`all_counts` sums them over the ranks. ``field`` is the input's key."""
    sums: dict[str, torch.Tensor] = {}
    model = stepper.model
    model.eval()
    with torch.no_grad():
        for batch in feeder:
            batch = {**batch, field: layout(batch[field])}
            with stepper.autocast():
                counts = stepper.task.eval_counts(model, batch)
            for key, value in counts.items():
                sums[key] = sums[key] + value if key in sums else value
    model.train()
    return sums


def all_counts(sums: dict[str, torch.Tensor], ranks: Ranks) -> dict[str, float]:
    """The task's validation counts summed over the ranks (a collective). The ranks first agree
    on the names: one with no validation batch has none of them."""
    names = sorted(set().union(*ranks.gather(sorted(sums))))
    values = [_scalar(n, sums[n]) if n in sums else 0.0 for n in names]
    return dict(zip(names, ranks.sum(values), strict=True))


def _scalar(name: str, value: Any) -> torch.Tensor:
    t = torch.as_tensor(value).detach().to(torch.float64)
    if t.numel() != 1:
        raise ValueError(f"validation count {name!r} has shape {tuple(t.shape)}: eval_counts "
                         f"must return one number per name, e.g. (pred == y).sum()")
    return t.reshape(())


def task_metrics(task: Task, totals: dict[str, float],
                 reserved: Iterable[str]) -> dict[str, float]:
    """The task's validation metrics; a name the loop reports itself (``reserved``) is refused."""
    out = dict(task.eval_metrics(totals))
    clash = sorted(set(out) & set(reserved))
    if clash:
        raise ValueError(f"{task_name(task)}.eval_metrics returned {', '.join(clash)}, which the "
                         f"loop reports itself; name the task's metrics val_*")
    return out


def layout(x: torch.Tensor) -> torch.Tensor:
    """Image batches in channels-last memory: oneDNN's (and cuDNN's tensor-core) convolutions
    run faster on it (measured here: the bench CNN's step at 128² took 0.42-0.45 s instead of
    0.58-0.66 s on one CPU thread), which is what a plain loop gets by permuting NHWC arrays."""
    return x.contiguous(memory_format=torch.channels_last) if x.dim() == 4 else x
