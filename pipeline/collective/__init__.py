"""Collective stage: topology, GPU→NIC rails, NCCL/RDMA advice per node and per rank, the
NCCL-log check, DDP overlap, bandwidth probe.

Nothing here imports Ray except :mod:`pipeline.collective.on_ray`, which imports it lazily.
The names below load on first use: what only reads the config (the CLI's parser) must not pay
for torch, which the bandwidth probe and DDP need.
"""

from importlib import import_module
from typing import Any

_WHERE = {"Advice": "advice", "CollectiveConfig": "config",
          "CollectiveTimeoutError": "process_group", "Rails": "rails", "RankPlan": "ranks",
          "Topology": "topology", "advise": "advice", "apply_rank_plan": "ranks",
          "check_nccl_log": "nccl_log", "choose_backend": "backend", "classify_link": "measure",
          "collective_guard": "process_group", "detect_topology": "topology",
          "gather_step_times": "straggler", "init_process_group": "process_group",
          "measure_collectives": "measure", "pair_rails": "rails", "parse_nccl_log": "nccl_log",
          "plan_ranks": "ranks", "straggler_summary": "straggler", "wrap_ddp": "ddp"}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"pipeline.collective.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pipeline.collective' has no attribute {name!r}")
