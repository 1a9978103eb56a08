"""One local Ray per test session, logical CPUs overcommitted so Train and Data both fit."""

import os

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """A local Ray shared by every integration test; yields its address."""
    import ray

    os.environ.setdefault("RAY_TRAIN_V2_ENABLED", "1")
    # Sample ids are accounted for exactly; never let Ray Data print progress bars into logs.
    ctx = ray.init(num_cpus=8, include_dashboard=False, log_to_driver=True,
                   configure_logging=False)
    try:
        yield ctx.address_info["address"]
    finally:
        ray.shutdown()
