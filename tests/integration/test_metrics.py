"""Feedline's Prometheus metrics appear in Ray's metrics export while a job runs."""

import re
import threading
import urllib.request
from pathlib import Path

import pytest
import ray

import pipeline
from tests.integration.test_run import QUICKSTART, write_images

EXPECTED = {"ray_feedline_samples_per_second", "ray_feedline_data_wait_fraction",
            "ray_feedline_step_seconds_bucket", "ray_feedline_h2d_bytes_total",
            "ray_feedline_bad_samples_total"}


def scrape_until(stop: threading.Event, seen: set, urls: list[str]) -> None:
    while not stop.wait(1.0):
        for url in urls:
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                continue
            seen.update(re.findall(r"^(ray_feedline_\w+)\{[^}]*run=\"metrics-test\"", text, re.M))


@pytest.mark.timeout(300)
def test_metrics_are_exported_during_a_run(ray_cluster, tmp_path):
    images = write_images(tmp_path / "imgs", 60, bad_kinds=("garbage",))
    urls = [f"http://{n['NodeManagerAddress']}:{n['MetricsExportPort']}/metrics"
            for n in ray.nodes() if n["Alive"]]
    seen: set[str] = set()
    stop = threading.Event()
    scraper = threading.Thread(target=scrape_until, args=(stop, seen, urls), daemon=True)
    scraper.start()
    try:
        pipeline.run(QUICKSTART, show_progress=False, sets=[
            "run.name=metrics-test", "data.source.kind=image_folder",
            f"data.source.path={images}", "data.image_size=[16, 16]", "train.epochs=3",
            f"run.output={tmp_path / 'out'}"])
        for _ in range(30):  # the agent exports on an interval; give it a few more
            if EXPECTED <= seen:
                break
            stop.wait(1.0)
    finally:
        stop.set()
        scraper.join(timeout=10)
    assert EXPECTED <= seen, sorted(seen)
    assert Path(tmp_path / "out" / "quarantine.jsonl").read_text().count("\n") == 1
