"""DDP with each comm hook trains like plain DDP; a peer that never joins is a clear error."""

import pytest
import torch
import torch.multiprocessing as mp

from pipeline.collective import CollectiveConfig, wrap_ddp

from . import collective_workers as workers

pytest.importorskip("sklearn")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return workers.spawn(workers.train_with_hooks, tmp_path_factory.mktemp("ddp"))


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hook", workers.HOOKS)
def test_each_comm_hook_reaches_the_accuracy_of_plain_ddp(trained, hook):
    plain = trained[0]["none"]["accuracy"]
    got = trained[0][hook]["accuracy"]
    assert plain > 0.9, f"plain DDP should learn digits; got {plain:.3f}"
    assert abs(got - plain) <= 0.04, f"{hook}: {got:.3f} vs plain {plain:.3f}"


@pytest.mark.timeout(240)
@pytest.mark.parametrize("hook", workers.HOOKS)
def test_ranks_end_with_identical_weights(trained, hook):
    # DDP broadcast rank 0's initial weights (the ranks seeded differently) and averaged
    # gradients every step, so both replicas must agree exactly.
    assert trained[0][hook]["weights"] == trained[1][hook]["weights"]


@pytest.mark.timeout(240)
def test_hook_wrapper_sees_the_all_reduce_without_a_configured_hook(trained):
    assert trained[0]["none+wrapper"]["hook_calls"] > 0
    assert trained[0]["none"]["hook_calls"] == 0


@pytest.mark.timeout(60)
def test_peer_that_never_joins_is_a_clear_error_within_the_timeout(tmp_path):
    timeout_s = 5.0
    released = mp.get_context("spawn").Event()
    rank0, _ = workers.spawn(workers.peer_never_joins, tmp_path, timeout_s, released)
    assert rank0["type"] == "CollectiveTimeoutError", rank0
    assert "collective.timeout_s = 5" in rank0["error"]
    assert "peer that never joined" in rank0["error"]
    assert rank0["elapsed_s"] < timeout_s + 15  # the timeout fired; not an endless wait


def test_wrap_ddp_without_a_process_group_says_how_to_get_one():
    with pytest.raises(RuntimeError, match="init_process_group"):
        wrap_ddp(torch.nn.Linear(2, 2), CollectiveConfig(), device="cpu")
