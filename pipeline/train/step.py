"""The optimisation side of the loop's step: precision, accumulation, clipping, the optimizer and
its schedule (Train worker; no Ray).

With ``train.grad_accum_steps`` k, every batch is a micro-step and every k-th one steps the
optimizer; each micro-step's loss is divided by k, so k batches of n samples give the gradient
of one batch of k·n (for a loss that is a mean over the batch)::

    micro-step:   1        2        ...   k
    backward:     no_sync  no_sync        all-reduce (DDP)   → clip → optimizer → schedule
    grads:        g1/k     +g2/k          +gk/k

An epoch whose batches do not fill its last group steps once more at its end with what it has
(:meth:`Stepper.finish_epoch`), so every sample trained is also stepped on.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from pipeline.errors import NonFiniteLossError
from pipeline.train.task import Task, task_name


def _not_a_loss(task: Any, loss: Any) -> str:
    what = (f"a tensor of shape {tuple(loss.shape)}" if isinstance(loss, torch.Tensor)
            else type(loss).__name__)
    return (f"{task_name(task)}.loss returned {what}; it must return one number to minimise: "
            f"reduce it (e.g. .mean() over the batch)")


def _untimed(name: str) -> Any:
    return contextlib.nullcontext()


@dataclass
class Stepper:
    """What one Train worker trains with, and how it steps (built in the worker; not picklable).

    ``model`` is the unwrapped model (checkpoints, validation, clipping); ``ddp`` is what the
    task's loss calls: the DDP wrapper, or the model itself on one rank.
    """

    task: Task
    model: nn.Module
    ddp: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any = None  # stepped after every optimizer step; None: constant learning rate
    device: torch.device = torch.device("cpu")
    accum: int = 1
    clip: float = 0.0
    precision: str = "fp32"

    def autocast(self) -> Any:
        """Around the forward and the loss: bf16 autocast on CPU and CUDA, else nothing."""
        if self.precision != "bf16":
            return contextlib.nullcontext()
        return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16)

    def is_last(self, step: int) -> bool:
        """Whether the epoch's ``step``-th batch (from 1) ends an accumulation group."""
        return step % self.accum == 0

    def sync(self, last: bool) -> Any:
        """Around the forward and backward (DDP decides in the forward): DDP's ``no_sync``
        unless the micro-step ends its group."""
        if last or not isinstance(self.ddp, nn.parallel.DistributedDataParallel):
            return contextlib.nullcontext()
        return self.ddp.no_sync()

    def join(self, uneven: bool) -> Any:
        """Around a pass whose ranks may run out of batches at different steps (after a resume,
        each skips different ids): DDP's join keeps the ones that run out in step."""
        if uneven and isinstance(self.ddp, nn.parallel.DistributedDataParallel):
            return self.ddp.join()
        return contextlib.nullcontext()

    max_nonfinite: int = 0  # train.max_nonfinite_steps
    on_diverged: Any = None  # called with the error's message before it is raised
    #: the profile's step spans (``StepProfiler.span``); None: not timed
    span: Callable[[str], Any] | None = None
    _nonfinite: torch.Tensor | None = None  # non-finite losses so far, counted on the device

    def train_step(self, batch: dict[str, torch.Tensor], index: int,
                   transform: Callable[[dict[str, torch.Tensor]], dict[str, torch.Tensor]]
                   | None = None) -> tuple[torch.Tensor, bool]:
        """The epoch's ``index``-th batch (from 1): ``transform`` (device-side augmentation)
        and the task's loss in the forward span, the backward span, and the optimizer span if
        the batch ends an accumulation group. Returns the detached loss and whether the
        optimizer stepped."""
        span = self.span or _untimed
        last = self.is_last(index)
        with self.sync(last):  # DDP decides in the forward whether the backward syncs
            with span("forward"):
                if transform is not None:
                    batch = transform(batch)
                with self.autocast():
                    loss = self.task.loss(self.ddp, batch)
                if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                    raise ValueError(_not_a_loss(self.task, loss))
            with span("backward"):
                self.backward(loss)
        if last:
            with span("optimizer"):
                self.step()
        return loss.detach(), last

    def backward(self, loss: torch.Tensor) -> None:
        bad = (~torch.isfinite(loss.detach())).to(torch.int64)  # no host sync per step
        self._nonfinite = bad if self._nonfinite is None else self._nonfinite + bad
        (loss / self.accum if self.accum > 1 else loss).backward()

    def check_finite(self, epoch: int) -> None:
        """Raise :class:`NonFiniteLossError` once more than ``max_nonfinite`` losses were NaN or
        infinite (one host sync: the loop calls it about once a second, at the end of every
        pass and before every checkpoint, so no checkpoint ever holds what a diverged step
        made of the weights)."""
        count = 0 if self._nonfinite is None else int(self._nonfinite.item())
        if count > self.max_nonfinite:
            lr = self.optimizer.param_groups[0].get("lr")
            message = (
                f"the training loss was NaN or infinite in {count} step(s) by epoch {epoch + 1} "
                f"(train.max_nonfinite_steps is {self.max_nonfinite}): the run diverged and was "
                f"stopped; the last checkpoint saved before it is kept. Lower train.lr (now "
                f"{lr:g}), set train.grad_clip_norm, or check the data and the task's loss")
            if self.on_diverged is not None:
                self.on_diverged(message)
            raise NonFiniteLossError(message)

    def step(self) -> None:
        """Clip, step the optimizer and the schedule, clear the gradients."""
        if self.clip > 0:
            nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)

    def finish_epoch(self, pending: int) -> bool:
        """Step on a last, partial group of ``pending`` micro-steps (every rank calls this, after
        DDP's join: a collective when there are several ranks). Its gradient is scaled to the
        mean over its micro-steps and averaged over the ranks, as DDP would; a rank with
        nothing pending adds zeros, as a rank that joined early does. True if it stepped."""
        if self.accum == 1:
            return False
        world = dist.get_world_size() if dist.is_initialized() else 1
        if world > 1:
            flag = torch.tensor([float(pending)], device=self.device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            if flag.item() == 0:
                return False
        elif pending == 0:
            return False
        params = [p for p in self.model.parameters() if p.requires_grad]
        for p in params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            elif pending:
                p.grad.mul_(self.accum / pending)
        if world > 1:
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            dist.all_reduce(flat)
            flat /= world
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
                offset += p.numel()
        self.step()
        return True


def schedule_steps(*, num_train: int, world: int, batch_size: int, accum: int,
                   epochs: int) -> int:
    """The run's optimizer steps, estimated: each rank's even share of the training split in
    batches, groups of ``accum`` (a bad sample dropped on the way makes it a little fewer)."""
    rows = math.ceil(num_train / max(1, world))
    return epochs * math.ceil(math.ceil(rows / batch_size) / accum)
