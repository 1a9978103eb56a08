"""Folders written once and shared by every later run: build aside, publish by rename.

A cache folder is complete when it holds ``.complete``. It is built in a temporary sibling and
renamed into place, so two runs starting at once never read a half-written folder and a failed
write leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = ".complete"


def is_complete(root: Path) -> bool:
    return (root / MARKER).exists()


@contextmanager
def publish_once(root: Path, prefix: str) -> Iterator[Path]:
    """Yield a temporary folder to fill; on success it becomes ``root`` atomically."""
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=root.parent))
    try:
        yield tmp
        (tmp / MARKER).touch()
        try:
            os.rename(tmp, root)
        except OSError:  # another run won the race, or a stale partial folder is in the way
            if is_complete(root):
                shutil.rmtree(tmp, ignore_errors=True)
            else:
                shutil.rmtree(root, ignore_errors=True)
                os.rename(tmp, root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
