"""summary.json as a type: the keys each status writes, the nulls that are answers, a typo that
cannot be written, and the mapping it reads as."""

import pytest

from pipeline.job.summary import RunSummary


def test_each_status_writes_its_keys_and_the_nulls_that_are_answers():
    running = RunSummary(status="running", name="q", epochs=3, pid=7, pid_start=11, host="h",
                         started="2026-12-06T07:00:00+0000", resume=None)
    assert running.as_dict() == {"status": "running", "name": "q", "epochs": 3, "pid": 7,
                                 "pid_start": 11, "host": "h",
                                 "started": "2026-12-06T07:00:00+0000", "resume": None}
    stopped = RunSummary(status="stopped", signal="SIGINT", name="q", epochs=3, epochs_done=0)
    assert stopped.as_dict() == {"status": "stopped", "name": "q", "epochs": 3, "resume": None,
                                 "signal": "SIGINT", "epochs_done": 0, "resumes_at": None,
                                 "ray_address": None, "checkpoint": None}
    done = RunSummary(status="succeeded", name="q", epochs=3, samples=10, accounting=[])
    assert done["exactly_once"] is None and done["checkpoint"] is None  # no ids; no checkpoint
    assert "pid" not in done and "signal" not in done
    # a run that trained, then failed (the bad-sample threshold): a finished run's keys
    failed = done | {"status": "failed", "error": "too many bad samples"}
    assert failed["error"] == "too many bad samples" and failed["checkpoint"] is None


def test_a_key_that_is_not_a_field_cannot_be_written():
    with pytest.raises(TypeError, match="exactly_onse"):
        RunSummary(status="running") | {"exactly_onse": True}


def test_it_reads_as_the_mapping_the_file_is():
    summary = RunSummary(status="succeeded", name="q", epochs=1, samples=5,
                         breakdown=[{"phase": "ray start", "seconds": 1.0}])
    assert summary == summary.as_dict() and dict(summary) == summary.as_dict()
    assert summary.get("wall_seconds") is None and summary.get("samples") == 5
    assert RunSummary.from_dict(summary.as_dict() | {"from_a_newer_version": 1}) == summary
    with pytest.raises(TypeError):
        RunSummary.from_dict({"name": "no status"})
