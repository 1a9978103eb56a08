"""measure_collectives on a real 2-rank gloo group: correct results, nccl-tests arithmetic."""

import pytest

from . import collective_workers as workers


@pytest.mark.timeout(120)
def test_measure_collectives_on_two_gloo_ranks(tmp_path):
    rank0, rank1 = workers.spawn(workers.bench, tmp_path)
    rows = rank0["rows"]
    assert [(r["op"], r["size_bytes"]) for r in rows] == [
        (op, size) for size in (1024, 65536)
        for op in ("all_reduce", "all_gather", "reduce_scatter")]
    for row in rows:
        assert row["correct"], row
        assert row["time_s"] > 0
        factor = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5}[row["op"]]
        assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * factor)
        assert (row["raw_busbw_GBps"] is None) == (row["op"] != "all_reduce")
    # The reported time is the slowest rank's: both ranks agree on it.
    assert [r["time_s"] for r in rows] == [r["time_s"] for r in rank1["rows"]]
