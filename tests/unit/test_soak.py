"""benchmarks/soak.py's pieces that decide its verdict: which processes it samples and the slope
it fits."""

import importlib.util
import subprocess
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "soak", Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py")
soak = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(soak)


def _samples(minutes: int, series: dict[int, tuple[str, float, float]]) -> list[dict]:
    """One sample a minute; pid → (name, MiB/min, alive until minute): RSS grows by the rate
    from 100 MiB, anonymous RSS by half of it."""
    return [{"t_min": float(t), "processes": {
        pid: (name, 100 + rate * t, 50 + rate / 2 * t)
        for pid, (name, rate, until) in series.items() if t < until}} for t in range(minutes)]


def test_slopes_fit_growth_after_warmup_and_skip_short_lived_processes():
    samples = _samples(20, {1: ("ray::Leaky", 2.0, 99), 2: ("raylet", 0.0, 99),
                            3: ("ray::Task", 5.0, 6)})
    # A warm-up jump the fit must ignore.
    for sample in samples[:3]:
        name, _, anon = sample["processes"][2]
        sample["processes"][2] = (name, 10.0, anon)
    ordered = soak.slopes(samples, warmup_min=3)
    rows = {row["pid"]: row for row in ordered}
    assert set(rows) == {1, 2}, "pid 3 was in 3 of 17 post-warm-up samples: not a leak candidate"
    assert rows[1]["slope_mib_per_min"] == pytest.approx(2.0)
    assert rows[1]["anon_slope_mib_per_min"] == pytest.approx(1.0)
    assert rows[2]["slope_mib_per_min"] == pytest.approx(0.0, abs=1e-9)
    assert [row["pid"] for row in ordered] == [1, 2], "steepest first"


@pytest.mark.timeout(30)
def test_ray_processes_finds_only_ray_children_of_this_process():
    # `sleep` named as an actor (argv[0]): Popen returns once the exec is done, so its command
    # line is the fake actor's already
    ray_like = subprocess.Popen(["ray::FakeActor", "30"], executable="sleep")
    other = subprocess.Popen(["sleep", "30"])
    try:
        found = soak.ray_processes()
        assert ray_like.pid in found
        name, rss, anon = found[ray_like.pid]
        assert name == "ray::FakeActor" and rss > 0 and 0 < anon <= rss
        assert other.pid not in found
    finally:
        for proc in (ray_like, other):
            proc.kill()
            proc.wait()
