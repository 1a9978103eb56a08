"""Unit tests never start Ray: ``ray.init`` raises so a test cannot start it by accident."""

import pytest


@pytest.fixture(autouse=True)
def _forbid_ray_init(monkeypatch):
    try:
        import ray
    except ImportError:  # a torch-only machine (the GPU box) has no Ray
        return

    def refuse(*args, **kwargs):
        raise RuntimeError("unit tests must not start Ray; move this test to tests/integration")

    monkeypatch.setattr(ray, "init", refuse)
