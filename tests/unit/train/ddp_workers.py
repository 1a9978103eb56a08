"""Rank functions for the 2-process gloo test of accumulation under DDP (spawned, so they live
in an importable module). Each writes what it observed to ``<out>/rank<r>.json``."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook

from pipeline.collective import CollectiveConfig, init_process_group
from pipeline.profile import StepProfiler
from pipeline.train.loop import _build
from pipeline.train.task import ClassificationTask
from pipeline.transfer import DeviceFeeder
from tests.unit.train.loop_fixtures import batches, one_pass, spec

CPU = torch.device("cpu")
SIZES = [6] * 6  # rank r trains batches r, r+2, r+4: one whole group of 2, then half a group


def accumulate(rank: int, port: int, out: str) -> None:
    torch.set_num_threads(1)  # two ranks share two cores
    init_process_group(CollectiveConfig(backend="gloo", timeout_s=60), rank=rank, world_size=2,
                       init_method=f"tcp://127.0.0.1:{port}", has_gpu=False)
    worker_spec = spec(ClassificationTask(), model="mlp", grad_accum_steps=2)
    torch.manual_seed(rank)  # different weights: DDP starts every rank from rank 0's
    prof = StepProfiler(rank=rank, device=CPU, enabled=False)
    stepper = _build(worker_spec, CPU, 2, prof)
    all_reduces = []

    def counting(state, bucket):
        all_reduces.append(bucket.index())
        return allreduce_hook(state, bucket)

    stepper.ddp.register_comm_hook(None, counting)
    with DeviceFeeder(batches(SIZES)[rank::2], device="cpu") as feeder:
        steps = one_pass(feeder, stepper, prof, worker_spec).steps
    stepped = stepper.finish_epoch(steps % stepper.accum)
    Path(out, f"rank{rank}.json").write_text(json.dumps({
        "steps": steps, "stepped_at_end": stepped, "all_reduces": len(all_reduces),
        "weights": [p.detach().reshape(-1).tolist() for p in stepper.model.parameters()]}))
    # both ranks are done with the group before either tears it down: a rank that exits with
    # its gloo group alive can abort ("terminate called without an active exception")
    dist.barrier()
    dist.destroy_process_group()
