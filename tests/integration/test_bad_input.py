"""Bad input a new user hands over, through a real job: a FIFO and a decompression bomb in an
image folder are quarantined with their reasons, and a threshold stop still says which files."""

import json
import os
from pathlib import Path

import pytest

import pipeline
from pipeline.data.udf.reader import BadSampleThresholdError
from tests.integration.test_run import QUICKSTART, write_images
from tests.unit.data.test_bad_input import write_bomb


def run_folder(folder: Path, out: Path, *sets: str):
    return pipeline.run(QUICKSTART, show_progress=False, sets=[
        "data.source.kind=image_folder", f"data.source.path={folder}", "data.val_fraction=0",
        "data.image_size=[16, 16]", "train.epochs=1", f"run.output={out}", *sets])


def quarantine(out: Path) -> dict[str, dict]:
    lines = (out / "quarantine.jsonl").read_text().splitlines()
    return {Path(r["source"]).name: r for r in map(json.loads, lines)}


@pytest.mark.timeout(300)
def test_fifo_and_bomb_are_quarantined_and_the_run_finishes(ray_cluster, tmp_path):
    folder = write_images(tmp_path / "imgs", 40)
    os.mkfifo(folder / "0" / "pipe.png")  # opening it would block the actor forever
    write_bomb(folder / "1" / "bomb.png")  # 20000 x 20000 pixels in a few dozen KB
    summary = run_folder(folder, tmp_path / "out").summary
    assert summary["status"] == "succeeded" and summary["bad_samples"] == 2
    records = quarantine(tmp_path / "out")
    assert records.keys() == {"pipe.png", "bomb.png"}
    assert records["pipe.png"]["error_type"] == "not_a_regular_file"
    assert records["bomb.png"]["error_type"] == "too_large"
    assert "data.max_image_pixels" in records["bomb.png"]["message"]
    [epoch] = summary["accounting"]
    assert (epoch["lost"], epoch["duplicated"], epoch["quarantined"]) == (0, 0, 2)
    assert epoch["unique"] + len(epoch["split_remainder"]) == 80
    assert summary["exactly_once"] is True


@pytest.mark.timeout(300)
def test_a_threshold_stop_still_writes_the_quarantine(ray_cluster, tmp_path):
    folder = write_images(tmp_path / "imgs", 30)
    for i in range(30):
        (folder / str(i % 2) / f"junk{i:02d}.png").write_bytes(b"not an image")
    with pytest.raises(BadSampleThresholdError, match=r"data.max_consecutive_bad \(1\) exceeded"):
        run_folder(folder, tmp_path / "out", "data.max_consecutive_bad=1")
    records = quarantine(tmp_path / "out")
    assert len(records) >= 2 and all(name.startswith("junk") for name in records)
    assert {r["error_type"] for r in records.values()} == {"UnidentifiedImageError"}
