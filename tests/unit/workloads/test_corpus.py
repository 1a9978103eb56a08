"""The stdlib docstring corpus: what it collects, that it is written once, and deterministic."""

import pyarrow.parquet as pq
import pytest

from pipeline.workloads import corpus
from pipeline.workloads.corpus import (
    corpus_files,
    docstrings,
    stdlib_files,
    stdlib_root,
    write_corpus,
)

MODULE = '''"""The module's docstring, long enough to keep."""

import sys


class Reader:
    """Reads things, one line at a time, carefully."""

    def read(self):
        """Return the next line, or an empty string at the end."""

        def helper():
            """A nested helper's docstring is kept as well."""

    def short(self):
        """Too short."""


if sys.platform == "win32":
    def windows_only():
        """Defined under an if block, still documentation."""
'''


def fake_stdlib(root):
    """A stdlib-shaped tree: modules, a package, tests and site-packages to skip."""
    (root / "pkg").mkdir(parents=True)
    (root / "test").mkdir()
    (root / "site-packages" / "thirdparty").mkdir(parents=True)
    (root / "alpha.py").write_text(MODULE)
    (root / "pkg" / "__init__.py").write_text('"""The package pkg, documented at length."""\n')
    (root / "pkg" / "beta.py").write_text('def f():\n    """Function f of beta, documented."""\n')
    (root / "gamma.py").write_text('"""Gamma: the third module with a docstring."""\n')
    (root / "nodoc.py").write_text("x = 1\n")
    (root / "test" / "test_alpha.py").write_text('"""A test module, not documentation."""\n')
    (root / "site-packages" / "thirdparty" / "m.py").write_text('"""Third-party text."""\n')
    return root


def read_rows(path):
    return [pq.read_table(f).to_pylist() for f in corpus_files(path)]


def test_docstrings_come_in_source_order_with_qualified_names():
    found = list(docstrings(MODULE, min_chars=20))
    assert [name for name, _ in found] == ["", "Reader", "Reader.read", "Reader.read.helper",
                                           "windows_only"]
    assert found[1][1] == "Reads things, one line at a time, carefully."


def test_the_real_stdlib_has_documentation_and_its_tests_are_skipped():
    files = stdlib_files(stdlib_root())
    assert any(f.as_posix() == "json/decoder.py" for f in files)
    assert not any(part.startswith("test") for f in files for part in f.parts[:-1])
    names = [n for n, _ in docstrings((stdlib_root() / "json" / "decoder.py").read_bytes())]
    assert "JSONDecoder.decode" in names


def test_corpus_is_written_once_round_robin_and_deterministic(tmp_path, monkeypatch, caplog):
    lib = fake_stdlib(tmp_path / "lib")
    (lib / "broken.py").write_text("def (:\n")
    out = write_corpus(tmp_path / "corpus", num_files=2, root=lib, min_chars=20)
    assert (out / ".complete").exists()
    assert "broken.py" in caplog.text  # skipped, and said so
    rows = read_rows(out)
    # modules sorted: alpha, gamma, pkg/__init__, pkg/beta → files 0, 1, 0, 1
    assert [r["origin"] for r in rows[0]] == [
        "alpha.py", "alpha.py:Reader", "alpha.py:Reader.read", "alpha.py:Reader.read.helper",
        "alpha.py:windows_only", "pkg/__init__.py"]
    assert [r["origin"] for r in rows[1]] == ["gamma.py", "pkg/beta.py:f"]
    assert rows[1][0]["text"] == "Gamma: the third module with a docstring."
    assert all("test" not in r["origin"] and "Third" not in r["text"] for f in rows for r in f)

    again = write_corpus(tmp_path / "corpus2", num_files=2, root=lib, min_chars=20)
    assert read_rows(again) == rows
    assert [f.read_bytes() for f in corpus_files(again)] == [
        f.read_bytes() for f in corpus_files(out)]

    def fail(*args, **kwargs):
        raise AssertionError("a complete corpus must not be collected again")

    monkeypatch.setattr(corpus, "collect", fail)
    assert write_corpus(out, num_files=2, root=lib) == out
    assert read_rows(out) == rows


def test_a_failed_write_leaves_no_corpus(tmp_path, monkeypatch):
    lib = fake_stdlib(tmp_path / "lib")
    import pyarrow.parquet

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(pyarrow.parquet, "write_table", broken)
    with pytest.raises(OSError, match="disk full"):
        write_corpus(tmp_path / "corpus", root=lib, min_chars=20)
    assert list(tmp_path.iterdir()) == [lib]


def test_no_docstrings_is_an_error_that_names_the_folder(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "empty.py").write_text("x = 1\n")
    with pytest.raises(ValueError, match="no docstrings"):
        write_corpus(tmp_path / "corpus", root=tmp_path / "lib")
    with pytest.raises(ValueError, match="num_files"):
        write_corpus(tmp_path / "corpus", num_files=0, root=tmp_path / "lib")
