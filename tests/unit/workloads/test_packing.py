"""Byte tokens packed into rows that keep document boundaries."""

import numpy as np
import pytest

from pipeline.workloads.packing import (
    EOD,
    VOCAB_SIZE,
    decode,
    encode,
    pack,
    pack_batch,
    pack_files,
    target_mask,
    token_stream,
)


def codes(text):
    return [EOD if c == "|" else ord(c) for c in text]  # "|" stands for EOD in the fixtures


def test_tokens_are_utf8_bytes_then_eod():
    tokens = encode("é€a")
    assert tokens.dtype == np.int64
    assert tokens.tolist() == [*"é€a".encode(), EOD]
    assert VOCAB_SIZE == EOD + 1 and tokens.max() < VOCAB_SIZE
    assert decode(tokens) == "é€a<EOD>"


def test_a_hand_built_batch_packs_into_known_rows():
    out = pack_batch({"text": np.array(["abc", "de", "fghij"], dtype=object)}, seq_len=4)
    assert out["tokens"].dtype == np.int64 and out["doc"].dtype == np.int32
    assert out["tokens"].tolist() == [codes("abc|d"), codes("de|fg"), codes("ghij|")]
    assert out["doc"].tolist() == [[0, 0, 0, 0, 1], [0, 0, 0, 1, 1], [0, 0, 0, 0, 0]]
    # a target in another document than its input is masked: "|" → "d" and "|" → "f"
    assert target_mask(out["doc"]).tolist() == [[True, True, True, False],
                                                [True, True, False, True],
                                                [True, True, True, True]]


def test_every_target_once_and_less_than_a_row_dropped_per_batch():
    rng = np.random.default_rng(0)
    texts = ["".join(chr(97 + c) for c in rng.integers(0, 26, n))
             for n in rng.integers(1, 40, 50)]
    seq_len = 16
    stream, docs = token_stream(texts)
    out = pack(stream, docs, seq_len)
    rows = len(out["tokens"])
    assert rows == (len(stream) - 1) // seq_len
    targets = out["tokens"][:, 1:].reshape(-1)
    assert targets.tolist() == stream[1:1 + rows * seq_len].tolist()  # in order, none twice
    assert 0 <= len(stream) - 1 - len(targets) < seq_len  # the dropped tail
    inputs = out["tokens"][:, :-1]
    assert (inputs[:, 1:] == out["tokens"][:, 1:-1]).all()
    # a row's doc index changes exactly where the previous token is EOD
    changes = out["doc"][:, 1:] != out["doc"][:, :-1]
    assert (changes == (inputs == EOD)).all()
    assert (out["doc"][:, 0] == 0).all()


def test_packing_is_a_function_of_the_batch():
    texts = np.array(["one document", "another, longer document", "x"], dtype=object)
    a, b = pack_batch({"text": texts}, seq_len=8), pack_batch({"text": texts.copy()}, seq_len=8)
    assert all((a[k] == b[k]).all() for k in ("tokens", "doc"))


@pytest.mark.parametrize("texts", [[], ["ab"], [""]])
def test_a_batch_too_short_for_a_row_gives_none(texts):
    out = pack_batch({"text": np.array(texts, dtype=object)}, seq_len=4)
    assert out["tokens"].shape == (0, 5) and out["doc"].shape == (0, 5)
    assert out["tokens"].dtype == np.int64 and out["doc"].dtype == np.int32


def test_seq_len_must_be_positive():
    with pytest.raises(ValueError, match="seq_len"):
        pack(np.zeros(4, np.int64), np.zeros(4, np.int64), 0)


def test_pack_files_packs_each_file_alone(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = {"a.parquet": ["first file, one", "two"], "b.parquet": ["second file's only doc"]}
    for name, texts in files.items():
        pq.write_table(pa.table({"text": texts, "origin": ["x"] * len(texts)}), tmp_path / name)
    paths = np.array([str(tmp_path / n) for n in files])
    got = pack_files({"path": paths}, seq_len=8)
    alone = [pack_batch({"text": np.array(t, dtype=object)}, seq_len=8) for t in files.values()]
    for k in ("tokens", "doc"):
        assert (got[k] == np.concatenate([a[k] for a in alone])).all()
    empty = pack_files({"path": np.array([], dtype=str)}, seq_len=8)
    assert empty["tokens"].shape == (0, 9) and empty["doc"].dtype == np.int32
