"""One local Ray per test session, logical CPUs overcommitted so Train and Data both fit."""

import os

import pytest

from pipeline.cluster.session import local_ray_env


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray shared by every integration test; yields its address."""
    import ray

    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    os.environ.update(local_ray_env())  # as Feedline's own local Ray has it
    # address="local": a new cluster even if another Ray (`ray start`) runs on this machine
    ctx = ray.init(address="local", num_cpus=8, include_dashboard=False)
    try:
        yield ctx.address_info["address"]
    finally:
        ray.shutdown()
