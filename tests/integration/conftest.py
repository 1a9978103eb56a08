"""One local Ray per test session, logical CPUs overcommitted so Train and Data both fit."""

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray shared by every integration test; yields its address."""
    import ray

    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    # address="local": a new cluster even if another Ray (`ray start`) runs on this machine
    ctx = ray.init(address="local", num_cpus=8, include_dashboard=False)
    try:
        yield ctx.address_info["address"]
    finally:
        ray.shutdown()
