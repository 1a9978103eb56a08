"""Ray Train's controller gets the driver's settings in its own process, not as a runtime env
(an actor with one never takes a worker Ray started ahead of need, Ray #47212)."""

import os

import pytest

from pipeline.job import abortable


def test_the_controller_sets_its_environment_before_ray_train_reads_it(monkeypatch):
    seen = {}

    def ray_init(self, **init):  # Ray Train's controller reads its settings in __init__
        seen.update(env=os.environ.get("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S"), init=init)

    monkeypatch.setattr(abortable.RayTrainController, "__init__", ray_init)
    monkeypatch.delenv("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", raising=False)
    abortable.TrainController({"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.25"}, callbacks=[])
    assert seen == {"env": "0.25", "init": {"callbacks": []}}


@pytest.fixture(autouse=True)
def _keep_environment():
    before = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(before)
