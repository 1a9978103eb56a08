import pytest

from pipeline.cluster.planner import PlanError, plan_resources


def plan(**kw):
    args = dict(cluster_cpus=8, cluster_gpus=0, num_workers=2, cpus_per_worker=1,
                use_gpu="auto", data_min_actors=1, cpus_per_actor=1)
    return plan_resources(**(args | kw))


def test_budget_left_to_data_excludes_training_cpus():
    p = plan()
    assert (p.train_cpus, p.data_cpus, p.use_gpu) == (2, 6, False)


def test_starving_plan_names_the_numbers_to_change():
    with pytest.raises(PlanError) as info:
        plan(cluster_cpus=2, num_workers=2, cpus_per_worker=1)
    message = str(info.value)
    assert ("train.num_workers (2) x train.cpus_per_worker (1) = 2 of the cluster's 2 CPUs"
            in message)
    assert "leaving 0 for data.concurrency min (1)" in message
    assert "To fix: lower train.cpus_per_worker to 0.5 or less" in message


def test_half_cpu_workers_fit_a_two_core_machine():
    assert plan(cluster_cpus=2, cpus_per_worker=0.5).data_cpus == 1


@pytest.mark.parametrize("cpus,workers,per,actors,ok", [
    (4, 4, 1, 1, False), (5, 4, 1, 1, True), (16, 4, 2, 4, True), (16, 4, 2, 9, False),
    (1, 1, 0.5, 1, False), (100, 64, 1, 36, True),
])
def test_many_shapes(cpus, workers, per, actors, ok):
    if ok:
        assert plan(cluster_cpus=cpus, num_workers=workers, cpus_per_worker=per,
                    data_min_actors=actors).data_cpus >= actors
    else:
        with pytest.raises(PlanError):
            plan(cluster_cpus=cpus, num_workers=workers, cpus_per_worker=per,
                 data_min_actors=actors)


def test_gpu_auto_and_forced():
    assert plan(cluster_gpus=2).use_gpu
    assert not plan(cluster_gpus=1).use_gpu  # fewer GPUs than workers: train on CPU
    with pytest.raises(PlanError, match="train.use_gpu is true but the cluster has 1 GPU"):
        plan(cluster_gpus=1, use_gpu=True)


def test_separate_node_pools_do_not_share_cpus():
    p = plan(cluster_cpus=7, data_pool_cpus=4, train_pool_cpus=2)
    assert (p.train_cpus, p.data_cpus) == (2, 4)


def test_pool_too_small_names_the_placement():
    with pytest.raises(PlanError, match=r"train.placement selects nodes with 1 CPUs"):
        plan(train_pool_cpus=1)
    with pytest.raises(PlanError, match=r"data.placement selects nodes with 0 CPUs"):
        plan(data_pool_cpus=0, train_pool_cpus=4)


def test_only_data_placed_still_subtracts_training():
    # Train workers may land on the preprocessing nodes, so their CPUs are not preprocessing's.
    assert plan(data_pool_cpus=4).data_cpus == 2


GIB = 1 << 30


def test_a_plan_whose_processes_outgrow_the_memory_is_refused_with_the_number_to_change():
    # the issue-30 probe on this machine: 2 CPUs, ~16 GiB for processes, 64 workers
    with pytest.raises(PlanError) as info:
        plan(cluster_cpus=2, num_workers=64, cpus_per_worker=0.016, cluster_memory=16 * GIB)
    message = str(info.value)
    assert message.startswith("plan needs about 38.7 GiB of memory: train.num_workers (64) x "
                              "~0.6 GiB per Train worker + data.concurrency min (1) x ~0.3 GiB")
    assert "the cluster has 16.0 GiB for processes" in message
    assert message.endswith("To fix: lower train.num_workers to 26 or less, or add nodes")
    # the remedy leads to a plan the planner accepts (with CPUs left for preprocessing)
    assert plan(cluster_cpus=2, num_workers=26, cpus_per_worker=0.03,
                cluster_memory=16 * GIB).data_cpus > 1


def test_the_cpu_remedy_is_only_offered_for_a_plan_the_memory_holds():
    with pytest.raises(PlanError, match="of memory"):  # memory first, not "lower cpus_per_worker"
        plan(cluster_cpus=2, num_workers=64, cpus_per_worker=1, cluster_memory=16 * GIB)
    with pytest.raises(PlanError, match="lower train.cpus_per_worker to 0.5 or less"):
        plan(cluster_cpus=2, num_workers=2, cpus_per_worker=1, cluster_memory=16 * GIB)


def test_no_memory_left_even_for_one_worker_asks_for_nodes():
    with pytest.raises(PlanError, match="To fix: add nodes with more memory"):
        plan(cluster_memory=0.5 * GIB)
