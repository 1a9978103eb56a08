from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.config import ConfigError
from pipeline.data.config import ParquetSource
from pipeline.data.sources import (
    plan_digits,
    plan_image_folder,
    plan_parquet,
    skipped_fields,
    skipped_warning,
)
from pipeline.data.sources.base import SKIPPED_LISTED
from pipeline.data.sources.publish import MARKER
from pipeline.data.synthetic import write_synthetic
from tests.unit.data.conftest import write_folder


def test_image_folder_lists_classes_and_stable_ids(image_folder):
    plan = plan_image_folder(image_folder)
    assert plan.classes == ("cat", "dog")
    table = plan.manifest.to_pydict()
    assert table["id"] == list(range(8))
    assert table["label"] == [0] * 4 + [1] * 4
    assert all(p.endswith(".png") for p in table["path"])
    assert plan_image_folder(image_folder).manifest.equals(plan.manifest)
    assert plan.skipped == ()


def test_image_folder_counts_and_names_every_file_it_does_not_read(image_folder):
    Image.new("L", (4, 4)).save(image_folder / "stray.png")  # beside the class folders
    (image_folder / ".DS_Store").write_bytes(b"\0")
    (image_folder / ".thumbs").mkdir()
    (image_folder / "cat" / ".DS_Store").write_bytes(b"\0")
    (image_folder / "dog" / "readme.txt").write_text("skip me")
    Image.new("RGB", (4, 4)).save(image_folder / "dog" / "photo.webp")
    plan = plan_image_folder(image_folder)
    assert plan.manifest.num_rows == 8  # the images in class folders, as before
    assert {Path(p).relative_to(image_folder).as_posix(): r for p, r in plan.skipped} == {
        "stray.png": "at the root, not in a class folder",
        ".DS_Store": "at the root, not in a class folder",
        ".thumbs": "hidden folder, not a class",
        "cat/.DS_Store": "not .png/.jpg/.jpeg",
        "dog/readme.txt": "not .png/.jpg/.jpeg",
        "dog/photo.webp": "not .png/.jpg/.jpeg",
    }
    fields = skipped_fields(plan.skipped)
    assert fields["skipped_files"] == 6
    assert {s["path"] for s in fields["skipped"]} == {p for p, _ in plan.skipped}
    warning = skipped_warning(plan)
    assert warning.startswith(f"6 file(s) under {image_folder} are not read: ")
    assert "3 not .png/.jpg/.jpeg (e.g. " in warning


def test_the_summary_lists_the_first_skipped_files_and_counts_them_all(tmp_path):
    skipped = tuple((str(tmp_path / f"{i}.txt"), "not .png/.jpg/.jpeg") for i in range(50))
    fields = skipped_fields(skipped)
    assert fields["skipped_files"] == 50
    assert [s["path"] for s in fields["skipped"]] == [p for p, _ in skipped[:SKIPPED_LISTED]]


def refusal(plan, *args) -> str:
    with pytest.raises(ConfigError) as info:
        plan(*args)
    return "\n".join(info.value.errors)


def test_image_folder_layouts_that_cannot_train_are_refused_with_the_remedy(tmp_path):
    layout = "lay it out as ROOT/<class name>/<image file>, one sub-folder per class"
    missing = refusal(plan_image_folder, tmp_path / "missing")
    assert missing == (f"data.source.path ({str(tmp_path / 'missing')!r}) does not exist; point "
                       f"it at a folder and {layout}")
    (tmp_path / "empty").mkdir()
    assert refusal(plan_image_folder, tmp_path / "empty").endswith(
        f"has no class sub-folders (it is empty); {layout}")
    write_folder(tmp_path / "flat", classes=("x",))
    for image in (tmp_path / "flat" / "x").iterdir():
        image.rename(tmp_path / "flat" / image.name)
    (tmp_path / "flat" / "x").rmdir()
    assert "has no class sub-folders (its 4 image file(s) lie directly in it)" in refusal(
        plan_image_folder, tmp_path / "flat")
    assert "is a file, not a folder" in refusal(plan_image_folder, tmp_path / "flat" / "0.png")
    write_folder(tmp_path / "one", classes=("cat",))
    assert refusal(plan_image_folder, tmp_path / "one") == (
        f"data.source.path ({str(tmp_path / 'one')!r}) has one class folder ('cat'); a "
        f"classifier needs at least two: add a sub-folder per class")
    write_folder(tmp_path / "hollow", classes=("cat", "dog"))
    (tmp_path / "hollow" / "owl").mkdir()
    (tmp_path / "hollow" / "owl" / "notes.txt").write_text("no images here")
    assert refusal(plan_image_folder, tmp_path / "hollow").endswith(
        "class folder(s) ['owl'] hold no .png/.jpg/.jpeg files; add images to them or remove them")


def test_digits_cache_marker_is_not_a_skipped_file(tmp_path):
    write_folder(tmp_path / "digits", classes=("0", "1"))
    (tmp_path / "digits" / MARKER).touch()  # a complete cache: nothing is written
    plan = plan_digits(str(tmp_path / "digits"))
    assert plan.manifest.num_rows == 8 and plan.skipped == ()


def write_parquet(path, rows=10, groups=2, offset=0):
    table = pa.table({"x1": np.arange(rows, dtype=np.float32) + offset,
                      "x2": np.ones(rows), "label": np.arange(rows) % 3})
    pq.write_table(table, path, row_group_size=rows // groups)


def test_parquet_plans_row_groups_with_running_ids(tmp_path):
    write_parquet(tmp_path / "a.parquet")
    write_parquet(tmp_path / "b.parquet", offset=100)
    plan, features = plan_parquet(ParquetSource(path=str(tmp_path)))
    assert features == ("x1", "x2")
    assert plan.classes == ("0", "1", "2")
    assert plan.manifest.column("id").to_pylist() == [0, 5, 10, 15]
    assert plan.manifest.column("rows").to_pylist() == [5, 5, 5, 5]


def test_parquet_column_errors(tmp_path):
    write_parquet(tmp_path / "a.parquet")
    with pytest.raises(ValueError, match=r"data.source.label_column \('y'\) is not a column"):
        plan_parquet(ParquetSource(path=str(tmp_path), label_column="y"))
    with pytest.raises(ValueError, match=r"a.parquet lacks column\(s\) \['x9'\]"):
        plan_parquet(ParquetSource(path=str(tmp_path), features=("x1", "x9")))


def test_every_bad_parquet_file_is_named_with_its_problem(tmp_path):
    for name in "abcd":
        write_parquet(tmp_path / f"{name}.parquet")
    table = pq.read_table(tmp_path / "a.parquet")
    pq.write_table(table.drop(["x2"]), tmp_path / "b.parquet")  # one of four lacks a feature
    pq.write_table(table.set_column(0, "x1", pa.array(["a"] * 10)), tmp_path / "c.parquet")
    (tmp_path / "d.parquet").write_bytes(b"")
    errors = refusal(plan_parquet, ParquetSource(path=str(tmp_path))).splitlines()
    assert errors == [
        f"data.source.features: {tmp_path / 'b.parquet'} lacks column(s) ['x2']; its columns are "
        f"['x1', 'label']: add them, or list only shared columns in data.source.features",
        f"data.source.features: column(s) {{'x1': 'string'}} of {tmp_path / 'c.parquet'} are not "
        f"numbers; convert them, or leave them out of data.source.features",
        f"data.source.path: {tmp_path / 'd.parquet'} is not a readable parquet file (Parquet "
        f"file size is 0 bytes); remove or replace it",
    ]


def test_a_folder_of_many_broken_files_lists_the_first_and_counts_the_rest(tmp_path):
    for i in range(15):
        (tmp_path / f"{i:02d}.parquet").write_bytes(b"")
    errors = refusal(plan_parquet, ParquetSource(path=str(tmp_path))).splitlines()
    assert len(errors) == 11 and errors[-1] == "... and 5 more"


@pytest.mark.parametrize("labels, message", [
    (["cat", "dog"] * 5, "is string in {file}; it must hold integer class indices 0..K-1 (string "
                         "labels are not mapped): convert them"),
    ([0.0, 1.0] * 5, "is double in {file}; it must hold integer class indices 0..K-1"),
    ([3] * 10, "holds only class 3 in {path}; a classifier needs at least two classes"),
    ([None] * 9 + [-1], "holds no class index >= 0 (null or negative) in {path}"),
    ([None, -1, 2] * 3 + [-1], "holds only class 2 in {path}"),  # bad rows are quarantined
])
def test_labels_that_cannot_train_name_the_label_column(tmp_path, labels, message):
    pq.write_table(pa.table({"x": np.ones(10), "y": pa.array(labels)}),
                   tmp_path / "t.parquet")
    error = refusal(plan_parquet, ParquetSource(path=str(tmp_path), label_column="y"))
    assert error.startswith("data.source.label_column ('y') ")
    assert message.format(file=tmp_path / "t.parquet", path=tmp_path) in error


def test_parquet_skips_empty_files_and_other_files_and_counts_them(tmp_path):
    write_parquet(tmp_path / "a.parquet")
    empty = pq.read_table(tmp_path / "a.parquet").slice(0, 0)
    pq.write_table(empty, tmp_path / "b.parquet")
    (tmp_path / "c.csv").write_text("x1,x2,label\n1,1,1\n")
    write_parquet(tmp_path / "d.parquet", offset=100)
    plan, _ = plan_parquet(ParquetSource(path=str(tmp_path)))
    assert plan.manifest.column("file").to_pylist() == [str(tmp_path / f) for f in
                                                         ("a.parquet",) * 2 + ("d.parquet",) * 2]
    assert plan.manifest.column("id").to_pylist() == [0, 5, 10, 15]
    assert sorted(plan.skipped) == [(str(tmp_path / "b.parquet"), "with 0 rows"),
                                    (str(tmp_path / "c.csv"), "not .parquet")]
    (tmp_path / "a.parquet").unlink()
    (tmp_path / "d.parquet").unlink()
    assert "holds no rows: every .parquet file has 0 rows" in refusal(
        plan_parquet, ParquetSource(path=str(tmp_path)))
    assert refusal(plan_parquet, ParquetSource(path=str(tmp_path / "no"))) == (
        f"data.source.path ({str(tmp_path / 'no')!r}) does not exist; give a .parquet file or a "
        f"directory of them")


def test_bad_label_rows_are_left_to_the_reader_and_do_not_count_as_classes(tmp_path):
    rng = np.random.default_rng(0)
    labels = np.arange(300) % 2
    labels[[5, 7]] = [-1, 9]
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": rng.normal(size=300), "label": pa.array(labels)}), path,
                   row_group_size=100)
    column = pq.ParquetFile(path).metadata.row_group(2).column(1)  # row group 2's labels
    raw = bytearray(path.read_bytes())
    start = column.dictionary_page_offset if column.has_dictionary_page \
        else column.data_page_offset
    raw[start:start + column.total_compressed_size] = rng.bytes(column.total_compressed_size)
    path.write_bytes(bytes(raw))
    plan, _ = plan_parquet(ParquetSource(path=str(path)))
    assert plan.classes == tuple(str(c) for c in range(10))  # -1 is not a class; 9 is
    assert plan.manifest.column("rows").to_pylist() == [100, 100, 100]


def test_synthetic_folders_have_nothing_skipped(tmp_path):
    plan = plan_image_folder(write_synthetic(tmp_path, count=6, size=(8, 8), fmt="png", classes=3))
    assert plan.manifest.num_rows == 6 and plan.skipped == ()
