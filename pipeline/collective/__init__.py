"""Collective stage: topology, GPU→NIC rails, NCCL/RDMA advice per node and per rank, the
NCCL-log check, DDP overlap, bandwidth probe.

Nothing here imports Ray except :mod:`pipeline.collective.cluster`, which imports it lazily.
"""

from pipeline.collective.advice import Advice, advise
from pipeline.collective.backend import choose_backend
from pipeline.collective.bench import classify_link, measure_collectives
from pipeline.collective.config import CollectiveConfig
from pipeline.collective.ddp import wrap_ddp
from pipeline.collective.nccl_log import check_nccl_log, parse_nccl_log
from pipeline.collective.process_group import (
    CollectiveTimeoutError,
    collective_guard,
    init_process_group,
)
from pipeline.collective.rails import Rails, pair_rails
from pipeline.collective.ranks import RankPlan, apply_rank_plan, plan_ranks
from pipeline.collective.straggler import gather_step_times, straggler_summary
from pipeline.collective.topology import Topology, detect_topology

__all__ = [
    "Advice",
    "CollectiveConfig",
    "CollectiveTimeoutError",
    "Rails",
    "RankPlan",
    "Topology",
    "advise",
    "apply_rank_plan",
    "check_nccl_log",
    "choose_backend",
    "classify_link",
    "collective_guard",
    "detect_topology",
    "gather_step_times",
    "init_process_group",
    "measure_collectives",
    "pair_rails",
    "parse_nccl_log",
    "plan_ranks",
    "straggler_summary",
    "wrap_ddp",
]
