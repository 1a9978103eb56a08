"""Inputs a new user hands over by accident: bombs, 16-bit and transparent images, FIFOs, reads
that never return, null labels. Each is decoded right or quarantined with its reason."""

import os
import struct
import threading
import time
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from PIL import Image

from pipeline.data import ReaderSpec, SampleReader
from pipeline.data.config import DataConfig
from pipeline.data.udf.reader import ReadThread
from tests.unit.data.udf.test_reader import Sink


def write_bomb(path, width=20000, height=20000):
    """A valid 1-bit PNG of ``width`` x ``height`` black pixels: a few dozen KB on disk."""
    def chunk(kind, data):
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    row = b"\0" * (1 + (width + 7) // 8)  # filter byte, then the packed bits
    packer = zlib.compressobj(9)
    data = b"".join(packer.compress(row) for _ in range(height)) + packer.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height,
                                                                    1, 0, 0, 0, 0))
                     + chunk(b"IDAT", data) + chunk(b"IEND", b""))
    return path


def read(folder, sink=None, **spec):
    """Decode every file under ``folder`` (sorted) as one manifest batch; label 0 for all."""
    paths = sorted(str(p) for p in folder.rglob("*.png"))
    batch = {"id": np.arange(len(paths)), "path": np.array(paths),
             "label": np.zeros(len(paths), np.int64)}
    spec = {"image_size": (10, 12), "channels": 1, "ship_uint8": True} | spec
    out = SampleReader(ReaderSpec(kind="image", origin="t", **spec), quarantine=sink)(batch)
    return batch, out


def by_name(batch, sink):
    names = {int(i): os.path.basename(p) for i, p in zip(batch["id"], batch["path"], strict=True)}
    return {names[r["id"]]: r for r in sink.records}


def assert_exactly_once(batch, out, sink):
    delivered, quarantined = set(out["id"].tolist()), {r["id"] for r in sink.records}
    assert not delivered & quarantined
    assert delivered | quarantined == set(batch["id"].tolist())
    assert len(sink.records) == len(quarantined)


def test_the_default_pixel_limit_is_pillows():
    assert DataConfig().max_image_pixels == ReaderSpec(kind="image", origin="t").max_image_pixels
    assert DataConfig().max_image_pixels == Image.MAX_IMAGE_PIXELS


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")
def test_huge_images_are_refused_before_decoding(image_folder):
    write_bomb(image_folder / "cat" / "bomb.png")  # 400 Mpixels: past twice Pillow's limit
    write_bomb(image_folder / "dog" / "big.png", 10000, 10000)  # 100 Mpixels: past the limit
    assert (image_folder / "cat" / "bomb.png").stat().st_size < 100_000
    sink = Sink()
    batch, out = read(image_folder, sink)
    records = by_name(batch, sink)
    assert set(records) == {"bomb.png", "big.png"} and len(out["id"]) == 8
    assert {r["error_type"] for r in records.values()} == {"too_large"}
    assert records["bomb.png"]["source"].endswith("cat/bomb.png")
    assert "10000x10000 = 100,000,000 pixels" in records["big.png"]["message"]
    assert "data.max_image_pixels (89,478,485)" in records["bomb.png"]["message"]
    assert_exactly_once(batch, out, sink)


def test_a_lower_pixel_limit_refuses_ordinary_images(image_folder):
    sink = Sink()
    batch, out = read(image_folder, sink, max_image_pixels=100)  # the images are 12x10
    assert len(out["id"]) == 0 and len(sink.records) == 8
    assert "12x10 = 120 pixels (from its header) > data.max_image_pixels (100)" in \
        sink.records[0]["message"]
    assert len(read(image_folder, max_image_pixels=120)[1]["id"]) == 8


def test_sixteen_bit_images_are_scaled_not_clipped(tmp_path):
    (tmp_path / "a").mkdir()
    values = np.linspace(0, 65535, 120).astype(np.uint16).reshape(10, 12)
    Image.fromarray(values).save(tmp_path / "a" / "grey16.png")
    assert Image.open(tmp_path / "a" / "grey16.png").mode == "I;16"
    _, out = read(tmp_path)
    expected = np.rint(values / 257).astype(np.uint8)
    np.testing.assert_array_equal(out["image"][0, 0], expected)
    assert abs(out["image"].mean() - 127.5) < 1  # Pillow's convert("L") gives ~254


def test_transparent_pixels_are_composited_on_black(tmp_path):
    (tmp_path / "a").mkdir()
    rgba = np.zeros((10, 12, 4), np.uint8)
    rgba[..., :3] = (200, 100, 50)  # colour hidden under full transparency on the left
    rgba[:, 6:, 3] = 255
    rgba[:, :6, 3] = 0
    rgba[0, 6:, 3] = 128
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a" / "rgba.png")
    Image.fromarray(rgba[..., [0, 3]], "LA").save(tmp_path / "a" / "la.png")
    palette = Image.fromarray(np.where(rgba[..., 3] == 0, 1, 2).astype(np.uint8), "P")
    palette.putpalette([0, 0, 0, 200, 100, 50, 10, 20, 30])
    palette.save(tmp_path / "a" / "p.png", transparency=1)  # index 1 transparent (tRNS chunk)
    _, out = read(tmp_path, channels=3)
    la, p, rgb = out["image"]  # sorted names: la.png, p.png, rgba.png
    np.testing.assert_array_equal(rgb[:, :, :6], 0)
    np.testing.assert_array_equal(rgb[:, 1:, 6:].reshape(3, -1).max(1), [200, 100, 50])
    np.testing.assert_allclose(rgb[:, 0, 6:].reshape(3, -1).mean(1), [100, 50, 25], atol=1)
    assert la[:, :, :6].max() == 0 and la[:, 1:, 6:].min() == 200
    assert p[:, :, :6].max() == 0 and p[:, :, 6:].reshape(3, -1).T.tolist() == [[10, 20, 30]] * 60


def test_a_fifo_is_refused_without_opening_it(image_folder):
    os.mkfifo(image_folder / "cat" / "pipe.png")  # open() would block until a writer comes
    sink = Sink()
    start = time.monotonic()
    batch, out = read(image_folder, sink)
    assert time.monotonic() - start < 5
    [record] = sink.records
    assert record["error_type"] == "not_a_regular_file" and record["source"].endswith("pipe.png")
    assert "FIFO" in record["message"] and len(out["id"]) == 8
    assert_exactly_once(batch, out, sink)


def test_a_read_that_never_returns_is_timed_out_and_the_actor_goes_on(image_folder, monkeypatch):
    # a stale mount: stat says regular file, open() never returns (here: a FIFO without writer)
    fifo = image_folder / "cat" / "1.png"
    fifo.unlink()
    os.mkfifo(fifo)
    monkeypatch.setattr("pipeline.data.udf.read_images.stat.S_ISREG", lambda mode: True)
    sink = Sink()
    start = time.monotonic()
    try:
        batch, out = read(image_folder, sink, sample_timeout_s=0.5)
    finally:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # let the abandoned read return
    assert time.monotonic() - start < 5
    [record] = sink.records
    assert record["error_type"] == "timeout" and record["source"].endswith("cat/1.png")
    assert "data.sample_timeout_s (0.5 s)" in record["message"]
    assert len(out["id"]) == 7  # the samples after it were read by a fresh thread
    assert_exactly_once(batch, out, sink)


def test_an_abandoned_read_thread_exits_once_its_read_returns(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = ReadThread()
    with pytest.raises(TimeoutError):
        reader.call(lambda path: open(path, "rb").read(), fifo, 0.2)
    reader.abandon()
    assert reader._thread.is_alive()  # stuck in open()
    os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    reader._thread.join(timeout=5)
    assert not reader._thread.is_alive()


def test_read_thread_reraises_on_the_caller_and_keeps_serving():
    reader = ReadThread()
    with pytest.raises(ZeroDivisionError):
        reader.call(lambda x: 1 / x, 0, 5)
    assert reader.call(lambda x: 1 / x, 4, 5) == 0.25
    assert reader.call(lambda _: threading.current_thread(), None, float("inf")).name == \
        "feedline-read"
    reader.abandon()


def test_any_decode_error_is_quarantined_with_its_file(image_folder, monkeypatch):
    import pipeline.data.udf.read_images as reader_module

    real = reader_module.to_eight_bit

    def fails_for_one(img, mode):
        if img.size == (12, 10) and not getattr(fails_for_one, "done", False):
            fails_for_one.done = True
            raise RuntimeError("a decoder bug")
        return real(img, mode)

    monkeypatch.setattr(reader_module, "to_eight_bit", fails_for_one)
    sink = Sink()
    batch, out = read(image_folder, sink)
    [record] = sink.records
    assert (record["error_type"], record["message"]) == ("RuntimeError", "a decoder bug")
    assert record["source"].endswith("cat/0.png") and len(out["id"]) == 7


def table_batch(path):
    meta = pq.ParquetFile(path).metadata
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    return {"id": np.cumsum([0, *sizes[:-1]]), "file": np.array([str(path)] * len(sizes)),
            "row_group": np.arange(len(sizes)), "rows": np.array(sizes)}


def test_null_and_out_of_range_labels_are_quarantined_per_row(tmp_path):
    labels = pa.array([0, 1, None, 2, -1, 1, None, 0], pa.int64())
    pq.write_table(pa.table({"x": np.arange(8.0), "label": labels}), tmp_path / "a.parquet",
                   row_group_size=4)
    sink = Sink()
    spec = ReaderSpec(kind="table", origin="t", features=("x",), num_classes=2)
    batch = table_batch(tmp_path / "a.parquet")
    out = SampleReader(spec, quarantine=sink)(batch)
    assert out["id"].tolist() == [0, 1, 5, 7] and out["label"].tolist() == [0, 1, 1, 0]
    kinds = {r["id"]: (r["error_type"], r["source"].rsplit("#", 1)[1]) for r in sink.records}
    assert kinds == {2: ("null_label", "rowgroup0/row2"), 6: ("null_label", "rowgroup1/row2"),
                     3: ("label_out_of_range", "rowgroup0/row3"),
                     4: ("label_out_of_range", "rowgroup1/row0")}
    assert "label (2) is not a class index in [0, 2)" in \
        next(r["message"] for r in sink.records if r["id"] == 3)
    # without the number of classes, only negative labels are known to be wrong
    unknown = SampleReader(ReaderSpec(kind="table", origin="t", features=("x",)))(batch)
    assert unknown["id"].tolist() == [0, 1, 3, 5, 7]


def test_an_unreadable_row_group_quarantines_its_rows(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"x": rng.normal(size=200), "label": np.arange(200) % 2}), path,
                   row_group_size=100)
    batch = table_batch(path)
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(1).column(0)
    raw = bytearray(path.read_bytes())  # overwrite row group 1's feature data with noise
    start = column.dictionary_page_offset if column.has_dictionary_page \
        else column.data_page_offset
    raw[start:start + column.total_compressed_size] = rng.bytes(column.total_compressed_size)
    path.write_bytes(bytes(raw))
    sink = Sink()
    out = SampleReader(ReaderSpec(kind="table", origin="t", features=("x",)),
                       quarantine=sink)(batch)
    assert out["id"].tolist() == list(range(100))
    assert sorted(r["id"] for r in sink.records) == list(range(100, 200))
    assert {r["source"] for r in sink.records} == {f"{path}#rowgroup1"}


def test_the_configured_pixel_limit_reaches_the_readers(image_folder):
    from pipeline.data.config import ImageFolderSource
    from pipeline.data.dataset import plan_source

    config = DataConfig(source=ImageFolderSource(path=str(image_folder)), max_image_pixels=100)
    assert plan_source(config)[1].max_image_pixels == 100
