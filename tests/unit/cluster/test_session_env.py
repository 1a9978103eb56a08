"""What a local Ray's processes inherit (pipeline.cluster.session): set for ray.init only."""

import os

from pipeline.cluster.session import (
    FOOTER_ACTORS,
    PREEMPTION_WATCHER,
    _environment,
    local_ray_env,
)


def test_a_local_ray_lists_parquet_files_with_one_footer_actor_per_core(monkeypatch):
    monkeypatch.delenv(FOOTER_ACTORS, raising=False)
    monkeypatch.setenv(PREEMPTION_WATCHER, "1")
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert local_ray_env() == {FOOTER_ACTORS: "2"}
    monkeypatch.setattr(os, "cpu_count", lambda: 96)
    assert local_ray_env() == {FOOTER_ACTORS: "32"}  # never more than Ray's own default
    monkeypatch.setenv(FOOTER_ACTORS, "7")
    assert local_ray_env() == {}  # the user's choice stands


def test_a_local_ray_runs_no_preemption_watcher_unless_the_user_asks(monkeypatch):
    monkeypatch.setenv(FOOTER_ACTORS, "7")
    monkeypatch.delenv(PREEMPTION_WATCHER, raising=False)
    assert local_ray_env() == {PREEMPTION_WATCHER: "0"}
    monkeypatch.setenv(PREEMPTION_WATCHER, "1")
    assert local_ray_env() == {}


def test_the_environment_is_restored_after_the_block(monkeypatch):
    monkeypatch.setenv("FEEDLINE_TEST_KEPT", "outer")
    monkeypatch.delenv("FEEDLINE_TEST_NEW", raising=False)
    with _environment({"FEEDLINE_TEST_KEPT": "inner", "FEEDLINE_TEST_NEW": "x"}):
        assert os.environ["FEEDLINE_TEST_KEPT"] == "inner" and os.environ["FEEDLINE_TEST_NEW"]
    assert os.environ["FEEDLINE_TEST_KEPT"] == "outer" and "FEEDLINE_TEST_NEW" not in os.environ
