"""The ImageFolder layout: ROOT/<class name>/<file>, listed once on the driver.

The listing is sorted, so a file's id (its position) is stable for an unchanged folder; the
manifest (id, path, label) travels to Ray Data and the files are read and decoded on CPU workers.
Every file the listing passes over (another extension, a stray file at the root, a hidden
folder) is kept in ``SourcePlan.skipped`` with the reason, and a layout that cannot train (no
class folders, one class, an empty class) is refused here, before Ray starts.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa

from pipeline.config import ConfigError
from pipeline.data.sources.base import SourcePlan
from pipeline.data.sources.publish import MARKER

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
LAYOUT = "lay it out as ROOT/<class name>/<image file>, one sub-folder per class"


def plan_image_folder(root: str | Path, field: str = "data.source.path") -> SourcePlan:
    """List ROOT/<class>/<file>; classes are the sorted sub-directory names."""
    root = Path(root).expanduser()
    where = f"{field} ({str(root)!r})"
    if not root.exists():
        raise ConfigError([f"{where} does not exist; point it at a folder and {LAYOUT}"])
    if not root.is_dir():
        raise ConfigError([f"{where} is a file, not a folder; {LAYOUT}"])
    # a folder Feedline wrote (digits, synthetic) holds its completion marker: not an input
    entries = sorted(p for p in root.iterdir() if p.name != MARKER)
    classes = [d.name for d in entries if d.is_dir() and not d.name.startswith(".")]
    skipped = [(str(p), "hidden folder, not a class" if p.is_dir() else
                "at the root, not in a class folder") for p in entries if p.name not in classes]
    if not classes:
        images = sum(p.name.lower().endswith(IMAGE_SUFFIXES) for p in entries)
        found = (f"its {images} image file(s) lie directly in it" if images else
                 f"it holds {len(entries)} other entries" if entries else "it is empty")
        raise ConfigError([f"{where} has no class sub-folders ({found}); {LAYOUT}"])
    paths, labels, empty = [], [], []
    for label, name in enumerate(classes):
        before = len(paths)
        for dirpath, _, files in sorted(os.walk(root / name)):
            for file in sorted(files):
                path = os.path.join(dirpath, file)
                if file.lower().endswith(IMAGE_SUFFIXES):
                    paths.append(path)
                    labels.append(label)
                else:
                    skipped.append((path, "not .png/.jpg/.jpeg"))
        if len(paths) == before:
            empty.append(name)
    if empty:
        raise ConfigError([f"{where}: class folder(s) {empty} hold no .png/.jpg/.jpeg files; "
                           f"add images to them or remove them"])
    if len(classes) == 1:
        raise ConfigError([f"{where} has one class folder ({classes[0]!r}); a classifier needs "
                           f"at least two: add a sub-folder per class"])
    manifest = pa.table({
        "id": pa.array(range(len(paths)), pa.int64()),
        "path": pa.array(paths, pa.string()),
        "label": pa.array(labels, pa.int64()),
    })
    return SourcePlan(manifest=manifest, classes=tuple(classes), kind="image", origin=str(root),
                      skipped=tuple(skipped))
