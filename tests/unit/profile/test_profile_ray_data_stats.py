"""Ray Data per-operator stats to plain dicts, from real captured stats text and real objects.

The fixtures were captured once from Ray 2.60: a read → map_batches(fn) → map_batches(actor
class, ActorPoolStrategy(1, 2)) pipeline of 200 rows iterated with ``iter_batches``, printing
``DataIterator.stats()`` with and without ``DataContext.verbose_stats_logs``, and a fused
read → map dataset's ``Dataset.stats()``. No Ray runtime is needed to read them.
"""

from pathlib import Path

import pytest

from pipeline.profile import operator_stats

FIXTURES = Path(__file__).parent / "fixtures"
KEYS = {"operator", "rows", "busy_s", "blocked_s", "tasks", "wall_s"}


def read(name):
    return (FIXTURES / name).read_text()


def test_iterator_stats_text_gives_each_operator_in_order():
    ops = operator_stats(read("ray_data_stats_iterator.txt"))
    assert [o["operator"] for o in ops] == ["ReadRange", "MapBatches(slow)->MapBatches(Up)"]
    read_op, map_op = ops
    assert all(set(o) == KEYS for o in ops)
    assert read_op["rows"] == map_op["rows"] == 200
    assert read_op["tasks"] == map_op["tasks"] == 8
    assert read_op["busy_s"] == pytest.approx(0.01894)   # "18.94ms total"
    assert map_op["busy_s"] == pytest.approx(0.10071)    # "100.71ms total"
    assert map_op["busy_s"] > read_op["busy_s"]          # the map sleeps 10 ms per batch
    assert read_op["wall_s"] == pytest.approx(0.23)
    assert read_op["blocked_s"] is None  # only printed with verbose stats


def test_verbose_stats_text_carries_backpressure_time():
    ops = {o["operator"]: o for o in operator_stats(read("ray_data_stats_iterator_verbose.txt"))}
    # task_submission_backpressure_time 1.149... + task_output_backpressure_time 0.714...
    assert ops["ReadRange"]["blocked_s"] == pytest.approx(1.1491658 + 0.71433339)
    assert ops["MapBatches(slow)->MapBatches(Up)"]["blocked_s"] == 0.0


def test_fused_dataset_stats_text():
    (op,) = operator_stats(read("ray_data_stats_fused.txt"))
    assert op["operator"] == "ReadRange->Map(<lambda>)"
    assert op["rows"] == 100 and op["tasks"] == 4
    assert op["busy_s"] == pytest.approx(0.01281)


def _dataset_stats():
    from ray.data._internal.stats import DatasetStats
    from ray.data.block import BlockExecStats, BlockStats

    def block(rows, wall, task):
        es = BlockExecStats(task_idx=task, node_id="node-1", start_time_s=1.0,
                            end_time_s=1.0 + wall, wall_time_s=wall)
        return BlockStats(num_rows=rows, size_bytes=8 * rows, exec_stats=es)

    source = DatasetStats(metadata={"ReadRange": [block(25, 0.01, 0), block(25, 0.02, 1)]},
                          parent=None)
    source.extra_metrics = {"task_submission_backpressure_time": 0.5,
                            "task_output_backpressure_time": 0.25}
    # Two sub-operators in one stage: printed as "Operator 1 Stage: executed in ..." + subs.
    stage = DatasetStats(metadata={"Decode": [block(50, 0.3, 0)],
                                   "Augment": [block(50, 0.1, 0), block(0, 0.05, 1)]},
                         parent=source, base_name="Stage")
    return stage


def test_stats_objects_and_their_text_agree():
    stats = _dataset_stats()
    from_object = operator_stats(stats)
    assert [o["operator"] for o in from_object] == ["ReadRange", "Decode", "Augment"]
    ops = {o["operator"]: o for o in from_object}
    assert ops["ReadRange"]["busy_s"] == pytest.approx(0.03)
    assert ops["ReadRange"]["blocked_s"] == pytest.approx(0.75)
    assert ops["Augment"]["tasks"] == 2 and ops["Augment"]["rows"] == 50
    assert operator_stats(stats.to_summary()) == from_object
    from_text = operator_stats(stats.to_summary().to_string())
    for a, b in zip(from_text, from_object, strict=True):
        assert a["operator"] == b["operator"]
        assert (a["rows"], a["tasks"]) == (b["rows"], b["tasks"])
        assert a["busy_s"] == pytest.approx(b["busy_s"], rel=0.01)  # printed with 2 decimals


def test_other_inputs_are_a_type_error():
    with pytest.raises(TypeError, match="DatasetStatsSummary"):
        operator_stats(42)
