"""The network side of a job's plan, on the driver: the NCCL/gloo settings advised for every
node (and every local rank) before the workers start."""

from __future__ import annotations

import os
from typing import Any

from pipeline.config import Config


def nccl_advice(config: Config) -> dict[str, Any]:
    """Detect every node's network, advise NCCL/gloo settings; the env common to all nodes goes
    to the Train workers' runtime env (set before their process group starts)."""
    from pipeline.collective import advise
    from pipeline.collective.on_ray import detect_on_nodes
    from pipeline.collective.ranks import plan_ranks

    advices, rank_plans = {}, {}
    for topology in detect_on_nodes():
        advices[topology.hostname] = advise(topology, os.environ)
        # what each worker gets on top of the common env, by node and GPU (ranks.apply_rank_plan)
        rank_plans[topology.hostname] = [p.as_dict() for p in
                                         plan_ranks(topology, advices[topology.hostname])]
    envs = [a.env for a in advices.values()]
    common = {k: v for k, v in envs[0].items() if all(e.get(k) == v for e in envs)} if envs else {}
    warnings = sorted({f"{host}: {w}" for host, a in advices.items()
                       for w in [*a.warnings, *a.conflicts]})
    differing = sorted({k for e in envs for k in e} - set(common))
    if differing:
        warnings.append(f"nodes disagree on {', '.join(differing)}: set them per node in the "
                        f"cluster's environment (see pipeline doctor)")
    applied = common if config.collective.apply_nccl_advice else {}
    return {"env": applied, "advised": common, "warnings": warnings,
            "reasons": {k: r for a in advices.values() for k, r in a.reasons.items()
                        if k in common},
            "rank_plans": rank_plans if config.collective.apply_nccl_advice else {}}
