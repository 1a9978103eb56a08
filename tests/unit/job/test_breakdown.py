"""The job's wall-time breakdown: consecutive phases that add up to process start → shutdown."""

import pytest

from pipeline.job.breakdown import breakdown, to_markdown


def epoch(n, started, seconds, first, ended):
    return {"epoch": n, "started_at": started, "epoch_seconds": seconds,
            "first_batch_seconds": first, "ended_at": ended}


def test_phases_are_consecutive_and_add_up_to_the_wall_time():
    marks = {"process_start": 100.0, "entered": 103.0, "ray_started": 110.0,
             "fit_started": 114.0, "fit_done": 150.0, "outputs_done": 151.5,
             "ray_stopped": 153.0}
    # the shape the loop reports: epoch wall from the first-batch wait to the last step,
    # report, checkpoint and validation up to ended_at, then the next epoch starts
    epochs = [epoch(1, 125.0, 10.0, 6.0, 136.0), epoch(2, 136.5, 4.0, 0.01, 141.0),
              epoch(3, 141.5, 4.0, 0.01, 146.0)]
    # rank 0's process began after fit_started (a prestarted one would have begun before: the
    # group-start phase is then 0 and the start-up phase begins at fit_started)
    rows = breakdown(marks, epochs, {"process_start": 117.0, "entered": 121.0})
    seconds = {r["phase"]: r["seconds"] for r in rows}
    assert sum(seconds.values()) == pytest.approx(53.0)
    assert seconds["imports and config"] == 3.0
    assert seconds["ray start"] == 7.0
    assert seconds["driver set-up (plan, network, datasets)"] == 4.0
    assert seconds["worker group start (Train controller, worker processes)"] == 3.0
    assert seconds["worker process start-up (imports, Train's process group)"] == 4.0
    assert seconds["worker set-up (model, DDP, dataset shards)"] == 4.0
    assert seconds["epoch 1 start-up (first batch)"] == 6.0
    assert seconds["epoch 1 steady training"] == 4.0
    assert seconds["epoch 1 report, checkpoint and validation"] == 1.0
    assert seconds["epoch 1 to 2 (between epochs)"] == 0.5
    assert seconds["epoch 2 start-up (first batch)"] == 0.01
    assert seconds["fit teardown (last checkpoint, link probe, worker group)"] == 4.0
    assert seconds["ray shutdown"] == 1.5
    assert sum(r["share"] for r in rows) == pytest.approx(1.0, abs=1e-3)
    assert "| **total** | **53.00** |" in to_markdown(rows)


def test_a_failed_run_ends_the_breakdown_at_its_last_mark():
    rows = breakdown({"process_start": 0.0, "entered": 1.0, "ray_started": 5.0,
                      "fit_started": 6.0}, [])
    assert [r["phase"] for r in rows] == ["imports and config", "ray start",
                                          "driver set-up (plan, network, datasets)"]


def test_a_prestarted_worker_process_starts_its_phase_at_fit_start():
    rows = breakdown({"process_start": 0.0, "entered": 1.0, "ray_started": 5.0,
                      "fit_started": 6.0, "fit_done": 20.0},
                     [epoch(1, 12.0, 5.0, 1.0, 17.0)], {"process_start": 4.0, "entered": 9.0})
    seconds = {r["phase"]: r["seconds"] for r in rows}
    assert seconds["worker group start (Train controller, worker processes)"] == 0.0
    assert seconds["worker process start-up (imports, Train's process group)"] == 3.0
    assert sum(seconds.values()) == pytest.approx(20.0)
