"""A text corpus from the Python standard library's docstrings, written once as parquet (driver).

Nothing is downloaded: the interpreter's own stdlib sources are parsed with :mod:`ast` (never
imported, so no module runs), and every module, class and function docstring of at least
``min_chars`` characters becomes one document. Test packages and ``site-packages`` are skipped.
The content and order are a function of the interpreter's stdlib alone: files are walked in
sorted order and each file's docstrings in source order (module first, then classes and
functions as they appear, nested ones after their parent).

Modules are dealt round-robin over ``num_files`` parquet files (module i → file i % num_files),
so every file samples the whole library and a few held-out files make a fair validation split.
Each file has one row group with columns ``text`` (the docstring) and ``origin``
(``json/decoder.py:JSONDecoder.decode``). The folder is built aside and renamed into place, like
the digits source, so concurrent runs never read a half-written corpus.
"""

from __future__ import annotations

import ast
import logging
import sysconfig
import warnings
from collections.abc import Iterator
from pathlib import Path

logger = logging.getLogger(__name__)

DEFAULT_PATH = "~/.cache/feedline/stdlib-text"
# folders under the stdlib whose files are not documentation (tests, third-party, build config)
SKIPPED_DIRS = ("site-packages", "dist-packages", "__pycache__")
SKIPPED_PREFIXES = ("test", "idle_test", "config-")

_DEFINITIONS = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def stdlib_root() -> Path:
    """The folder holding this interpreter's standard library sources."""
    return Path(sysconfig.get_paths()["stdlib"])


def stdlib_files(root: Path) -> list[Path]:
    """The stdlib's ``.py`` files relative to ``root``, sorted, without tests or site-packages."""
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        folders = rel.parts[:-1]
        if any(p in SKIPPED_DIRS or p.startswith(SKIPPED_PREFIXES) for p in folders):
            continue
        files.append(rel)
    return files


def docstrings(source: bytes | str, *, min_chars: int = 40) -> Iterator[tuple[str, str]]:
    """``(qualified name, docstring)`` of a module's source in source order: the module's own
    (named ``""``) first, then each class and function, nested ones right after their parent.
    Docstrings are cleaned (:func:`inspect.cleandoc`) and those shorter than ``min_chars``
    (``Return self.``) are left out."""
    with warnings.catch_warnings():  # invalid escape sequences in old sources: not our concern
        warnings.simplefilter("ignore", SyntaxWarning)
        tree = ast.parse(source)
    doc = ast.get_docstring(tree, clean=True)
    if doc and len(doc) >= min_chars:
        yield "", doc
    yield from _definitions(tree, "", min_chars)


def _definitions(node: ast.AST, name: str, min_chars: int) -> Iterator[tuple[str, str]]:
    """Docstrings of the classes and functions under ``node`` in source order, including those
    inside ``if``/``try``/``with`` blocks and inside other definitions."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, _DEFINITIONS):
            qualified = f"{name}.{child.name}" if name else child.name
            doc = ast.get_docstring(child, clean=True)
            if doc and len(doc) >= min_chars:
                yield qualified, doc
            yield from _definitions(child, qualified, min_chars)
        elif not isinstance(child, ast.expr):  # lambdas hold no docstrings
            yield from _definitions(child, name, min_chars)


def collect(root: Path, *, min_chars: int = 40) -> list[list[tuple[str, str]]]:
    """Per stdlib module (sorted), its ``(origin, text)`` documents. A file that does not parse
    (none does in CPython's own stdlib) is left out with a warning naming it."""
    modules = []
    for rel in stdlib_files(root):
        try:
            docs = list(docstrings((root / rel).read_bytes(), min_chars=min_chars))
        except (SyntaxError, ValueError) as exc:  # ValueError: null bytes in the source
            logger.warning("stdlib corpus: skipped %s, which does not parse: %s", rel, exc)
            continue
        if docs:
            where = rel.as_posix()
            modules.append([(f"{where}:{name}" if name else where, doc) for name, doc in docs])
    return modules


def write_corpus(path: str | Path = DEFAULT_PATH, *, num_files: int = 16,
                 min_chars: int = 40, root: Path | None = None) -> Path:
    """Write the stdlib docstring corpus as ``PATH/part-NNNNN.parquet`` once; return ``PATH``.

    A complete folder (it holds ``.complete``) is returned as it is, whatever ``num_files`` asks:
    delete it to rebuild. ``root`` replaces the stdlib folder (tests give a small tree)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from pipeline.data.sources.publish import is_complete, publish_once

    if num_files < 1:
        raise ValueError(f"num_files ({num_files}) must be >= 1")
    out = Path(path).expanduser()
    if is_complete(out):
        return out
    modules = collect(root if root is not None else stdlib_root(), min_chars=min_chars)
    if not modules:
        raise ValueError(f"no docstrings of >= {min_chars} characters under "
                         f"{root or stdlib_root()}; is the standard library's source installed?")
    parts: list[list[tuple[str, str]]] = [[] for _ in range(num_files)]
    for index, docs in enumerate(modules):
        parts[index % num_files].extend(docs)
    with publish_once(out, ".stdlib-text-") as tmp:
        for index, docs in enumerate(parts):
            table = pa.table({"text": pa.array([d for _, d in docs], pa.string()),
                              "origin": pa.array([o for o, _ in docs], pa.string())})
            pq.write_table(table, tmp / f"part-{index:05d}.parquet", row_group_size=1 << 30)
    count = sum(len(p) for p in parts)
    logger.info("wrote %d stdlib docstrings from %d modules to %s", count, len(modules), out)
    return out


def corpus_files(path: str | Path) -> list[Path]:
    """The corpus's parquet files in order."""
    return sorted(Path(path).expanduser().glob("part-*.parquet"))
