"""benchmarks/elastic.py's arithmetic: when the trainers were first fed, and its table."""

import argparse
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("elastic_bench", ROOT / "benchmarks" / "elastic.py")
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def sample(t, steps, actors, wait):
    return {"t": t, "steps": steps, "actors": actors, "wait": wait, "target": None}


def test_fed_after_counts_from_the_first_training_step():
    samples = [sample(100, 0, 1, 0.0),  # Ray Data starting: no steps, no wait measured
               sample(102, 8, 1, 0.8), sample(104, 8, 4, 0.3), sample(106, 9, 4, 0.01)]
    assert bench.fed_after(samples) == 4
    assert bench.fed_after(samples[:3]) is None  # never fed
    assert bench.fed_after([sample(102, 8, 0, 0.0)]) is None  # cache replay: nothing decoded


def test_the_table_compares_every_arm_with_the_best_fixed_pool():
    def row(rate, fed, actors):
        return {"samples_per_s": rate, "steady_samples_per_s": rate * 1.5, "wall_s": 100.0,
                "data_wait": 0.02, "fed_after_s": fed, "max_actors": actors,
                "actor_s": actors * 40.0, "decisions": [], "exactly_once": True}
    rows = {"fixed 2": [row(40.0, None, 2)], "fixed 4": [row(50.0, 8.0, 4), row(52.0, 6.0, 4)],
            "ray": [row(49.0, 4.0, 8)], "controller": [row(48.0, 14.0, 5)]}
    args = argparse.Namespace(reps=2, epochs=3, fixed=[2, 4], num_cpus=8, cache="off")
    text = bench.render(rows, args)
    assert "Best fixed pool: **fixed 4**" in text
    assert "| controller | 48.0 | 0.94 |" in text  # 48 / median(50, 52)
    assert "| fixed 2 | 40.0 | 0.78 | 60.0 | 2.0% | never | 2 |" in text
