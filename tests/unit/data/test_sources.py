import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pipeline.data.config import ParquetSource
from pipeline.data.sources import plan_image_folder, plan_parquet


def test_image_folder_lists_classes_and_stable_ids(image_folder):
    (image_folder / "notes.txt").write_text("not an image")
    (image_folder / "dog" / "readme.md").write_text("skip me")
    plan = plan_image_folder(image_folder)
    assert plan.classes == ("cat", "dog")
    table = plan.manifest.to_pydict()
    assert table["id"] == list(range(8))
    assert table["label"] == [0] * 4 + [1] * 4
    assert all(p.endswith(".png") for p in table["path"])
    assert plan_image_folder(image_folder).manifest.equals(plan.manifest)


def test_image_folder_errors_name_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"data.source.path \('.*missing'\) is not a directory"):
        plan_image_folder(tmp_path / "missing")
    (tmp_path / "empty" / "a").mkdir(parents=True)
    with pytest.raises(ValueError, match="holds no .png/.jpg/.jpeg files"):
        plan_image_folder(tmp_path / "empty")


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
    with pytest.raises(ValueError, match=r"names columns \['x9'\]"):
        plan_parquet(ParquetSource(path=str(tmp_path), features=("x1", "x9")))
