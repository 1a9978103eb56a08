"""The ImageFolder layout: ROOT/<class name>/<file>, listed once on the driver.

The listing is sorted, so a file's id (its position) is stable for an unchanged folder; the
manifest (id, path, label) travels to Ray Data and the files are read and decoded on CPU workers.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from pipeline.data.sources.base import SourcePlan

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


def plan_image_folder(root: str | Path, field: str = "data.source.path") -> SourcePlan:
    """List ROOT/<class>/<file>; classes are the sorted sub-directory names."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise ValueError(f"{field} ({str(root)!r}) is not a directory; point it at a folder laid "
                         f"out as ROOT/<class name>/<image file>")
    classes = sorted(d.name for d in root.iterdir() if d.is_dir() and not d.name.startswith("."))
    paths, labels = [], []
    for label, name in enumerate(classes):
        for dirpath, _, files in sorted(os.walk(root / name)):
            for file in sorted(files):
                if file.lower().endswith(IMAGE_SUFFIXES):
                    paths.append(os.path.join(dirpath, file))
                    labels.append(label)
    if not paths:
        raise ValueError(f"{field} ({str(root)!r}) holds no .png/.jpg/.jpeg files under class "
                         f"sub-directories; expected ROOT/<class name>/<image file>")
    manifest = pa.table({
        "id": pa.array(range(len(paths)), pa.int64()),
        "path": pa.array(paths, pa.string()),
        "label": pa.array(labels, pa.int64()),
    })
    return SourcePlan(manifest=manifest, classes=tuple(classes), kind="image", origin=str(root))
