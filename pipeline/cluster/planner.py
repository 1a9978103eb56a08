"""The resource planner: training workers and preprocessing share CPUs; refuse a starving plan.

Ray Train workers hold their CPUs for the whole run. If they take every CPU, Ray Data's actors
can never start and ``fit()`` waits forever: the classic hang. This pure function decides before
``fit()`` and says which number to change.

Memory is checked first: every Train worker and decode actor is a process with its own resident
memory (torch, Ray, the feeder's buffers), and a plan whose processes outgrow the nodes' memory
has Ray's memory monitor kill workers minutes into the run. So a remedy the planner prints (fewer
CPUs per worker, for instance) never leads to a plan the memory cannot hold.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.config.placement import PlacementConfig
from pipeline.errors import PlanError

GIB = 1 << 30
#: resident memory of one Train worker while it trains (measured here: 360 MiB once torch, Ray
#: and the loop are imported, before the model, DDP's buckets and the feeder's batches)
WORKER_BYTES = 0.6 * GIB
#: resident memory of one decode actor (measured here: 170 MiB once Ray Data, pyarrow and
#: Pillow are imported, before its blocks)
ACTOR_BYTES = 0.3 * GIB


@dataclass(frozen=True)
class ResourcePlan:
    """What the runtime decided: CPUs for training, the CPU budget left to Ray Data, GPU use."""

    cluster_cpus: float
    train_cpus: float
    data_cpus: float
    data_min_cpus: float
    use_gpu: bool
    gpu_reason: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)


def plan_resources(*, cluster_cpus: float, cluster_gpus: float, num_workers: int,
                   cpus_per_worker: float, use_gpu: bool | str, data_min_actors: int,
                   cpus_per_actor: float, data_pool_cpus: float | None = None,
                   train_pool_cpus: float | None = None,
                   cluster_memory: float | None = None) -> ResourcePlan:
    """Split the cluster between Train workers and preprocessing, or raise :class:`PlanError`.

    ``data_pool_cpus`` / ``train_pool_cpus`` are the CPUs of the nodes each stage's placement
    selects (None: the whole cluster). When both are given the stages live on separate nodes
    and training CPUs are not taken out of preprocessing's budget. ``cluster_memory`` is the
    memory Ray gives processes (its ``memory`` resource: the nodes' memory beside the object
    store); None skips the memory check.
    """
    if cluster_memory is not None:
        _check_memory(cluster_memory, num_workers, data_min_actors)
    if use_gpu == "auto":
        gpu = cluster_gpus >= num_workers > 0 and cluster_gpus > 0
        reason = (f"auto: cluster has {cluster_gpus:g} GPU(s) for {num_workers} worker(s)"
                  if gpu else f"auto: cluster has {cluster_gpus:g} GPU(s), training on CPU")
    else:
        gpu, reason = bool(use_gpu), f"train.use_gpu is {use_gpu}"
        if gpu and cluster_gpus < num_workers:
            raise PlanError(f"train.use_gpu is true but the cluster has {cluster_gpus:g} GPU(s) "
                            f"for train.num_workers ({num_workers}); lower train.num_workers to "
                            f"{int(cluster_gpus)} or set train.use_gpu: auto")
    train_cpus = num_workers * cpus_per_worker
    if train_pool_cpus is not None and train_pool_cpus < train_cpus:
        raise PlanError(f"train.placement selects nodes with {train_pool_cpus:g} CPUs, fewer than "
                        f"train.num_workers ({num_workers}) x train.cpus_per_worker "
                        f"({cpus_per_worker:g}) = {train_cpus:g}; add training nodes or lower "
                        f"those numbers")
    need = data_min_actors * cpus_per_actor
    if data_pool_cpus is not None and train_pool_cpus is not None:
        data_cpus = data_pool_cpus
        if data_cpus < need:
            raise PlanError(f"data.placement selects nodes with {data_cpus:g} CPUs, fewer than "
                            f"data.concurrency min ({data_min_actors}) x data.cpus_per_actor "
                            f"({cpus_per_actor:g}) = {need:g}; add preprocessing nodes or "
                            f"lower those numbers")
        return ResourcePlan(cluster_cpus=cluster_cpus, train_cpus=train_cpus,
                            data_cpus=data_cpus, data_min_cpus=need, use_gpu=gpu,
                            gpu_reason=reason)
    data_cpus = (data_pool_cpus if data_pool_cpus is not None else cluster_cpus) - train_cpus
    if data_cpus < need:
        fit = max(0.0, (data_pool_cpus or cluster_cpus) - need) / num_workers
        lower_per_worker = (f"lower train.cpus_per_worker to {fit:.2g} or less, " if fit > 0
                            else "")
        raise PlanError(
            f"plan starves preprocessing: train.num_workers ({num_workers}) x "
            f"train.cpus_per_worker ({cpus_per_worker:g}) = {train_cpus:g} of the cluster's "
            f"{cluster_cpus:g} CPUs, leaving {max(data_cpus, 0):g} for data.concurrency min "
            f"({data_min_actors}) x data.cpus_per_actor ({cpus_per_actor:g}) = {need:g}. "
            f"To fix: {lower_per_worker}lower train.num_workers, lower data.cpus_per_actor, or "
            f"add CPUs to the cluster")
    return ResourcePlan(cluster_cpus=cluster_cpus, train_cpus=train_cpus, data_cpus=data_cpus,
                        data_min_cpus=need, use_gpu=gpu, gpu_reason=reason)


def _check_memory(memory: float, num_workers: int, actors: int) -> None:
    need = num_workers * WORKER_BYTES + actors * ACTOR_BYTES
    if need <= memory:
        return
    fit = int((memory - actors * ACTOR_BYTES) // WORKER_BYTES)
    fix = (f"lower train.num_workers to {fit} or less, or add nodes" if fit >= 1
           else "add nodes with more memory")
    raise PlanError(f"plan needs about {need / GIB:.1f} GiB of memory: train.num_workers "
                    f"({num_workers}) x ~{WORKER_BYTES / GIB:.1f} GiB per Train worker + "
                    f"data.concurrency min ({actors}) x ~{ACTOR_BYTES / GIB:.1f} GiB per decode "
                    f"actor, but the cluster has {memory / GIB:.1f} GiB for processes (beside "
                    f"Ray's object store); Ray would kill workers once they outgrow it. To fix: "
                    f"{fix}")


def pool_cpus(placement: PlacementConfig) -> float | None:
    """CPUs of the alive nodes a placement selects; None when it selects the whole cluster."""
    import ray

    if not placement.labels and not placement.resources:
        return None
    total = 0.0
    for node in ray.nodes():
        labels, resources = node.get("Labels") or {}, node.get("Resources") or {}
        if (node.get("Alive") and all(labels.get(k) == v for k, v in placement.labels.items())
                and all(k in resources for k in placement.resources)):
            total += resources.get("CPU", 0.0)
    return total
