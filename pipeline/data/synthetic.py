"""Deterministic synthetic images, written once as an ImageFolder, for benchmarks and tests.

A benchmark that decodes real files measures real work; one that times arrays made in memory
measures nothing a trainer would see. Each image is a function of its sample id alone (a
smooth random field, a few shapes and pixel noise, so JPEG/PNG compress and decode like
photographs rather than flat colour), encoded once under a cache directory in the layout
:func:`~pipeline.data.sources.image_folder.plan_image_folder` reads::

    ROOT/class_00/0000000.jpg ... ROOT/class_09/0004095.jpg

Classes are contiguous runs of ids, so the folder listing's ids (its sorted positions) are the
generation ids: sample ``i`` of the manifest is ``synthetic_image(i, ...)``. Writing goes to a
temporary folder renamed into place, so two runs starting at once never see half a cache.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.data.sources.publish import is_complete, publish_once

logger = logging.getLogger(__name__)

FORMATS = {"jpeg": ".jpg", "png": ".png"}
JPEG_QUALITY = 90


def synthetic_image(sample_id: int, size: tuple[int, int], seed: int = 0) -> np.ndarray:
    """The RGB image (``height x width x 3`` uint8) of ``sample_id``; pure and deterministic."""
    from PIL import Image, ImageDraw

    height, width = size
    rng = np.random.default_rng([seed, sample_id])
    # Low-frequency colour field: an 8x8 grid upsampled, like the broad regions of a photo.
    coarse = rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)
    img = Image.fromarray(coarse, mode="RGB").resize((width, height),
                                                     Image.Resampling.BICUBIC)
    draw = ImageDraw.Draw(img)
    for _ in range(3):  # edges: what makes JPEG blocks expensive to code and decode
        x0, x1 = sorted(rng.integers(0, width, 2).tolist())
        y0, y1 = sorted(rng.integers(0, height, 2).tolist())
        fill = tuple(rng.integers(0, 256, 3).tolist())
        if rng.random() < 0.5:
            draw.rectangle((x0, y0, x1, y1), fill=fill)
        else:
            draw.ellipse((x0, y0, x1, y1), fill=fill)
    pixels = np.asarray(img, dtype=np.int16)
    noise = rng.normal(0.0, 10.0, pixels.shape).astype(np.int16)  # sensor noise: real entropy
    return np.clip(pixels + noise, 0, 255).astype(np.uint8)


def synthetic_label(sample_id: int, count: int, classes: int) -> int:
    """The class of ``sample_id``: contiguous runs, so listing order equals id order."""
    return sample_id * classes // count


def write_synthetic(cache_dir: str | Path, *, count: int, size: tuple[int, int] = (256, 256),
                    fmt: str = "jpeg", classes: int = 10, seed: int = 0) -> Path:
    """Write ``count`` images as ROOT/class_NN/<id>.<ext> once; return ROOT.

    ROOT is a sub-folder of ``cache_dir`` named after every parameter, so different sizes
    never share (or clobber) a cache.
    """
    if fmt not in FORMATS:
        raise ValueError(f"fmt ({fmt!r}) must be one of {sorted(FORMATS)}")
    if count < 1:
        raise ValueError(f"count ({count}) must be >= 1")
    if not 1 <= classes <= count:
        raise ValueError(f"classes ({classes}) must be between 1 and count ({count})")
    height, width = size
    if height < 8 or width < 8:
        raise ValueError(f"size ({size}) must be at least (8, 8) pixels")
    base = Path(cache_dir).expanduser()
    root = base / f"{fmt}-n{count}-{height}x{width}-c{classes}-s{seed}"
    if is_complete(root):
        return root
    from PIL import Image

    ext = FORMATS[fmt]
    options = {"quality": JPEG_QUALITY} if fmt == "jpeg" else {}
    with publish_once(root, ".synthetic-") as tmp:
        for sample_id in range(count):
            label = synthetic_label(sample_id, count, classes)
            folder = tmp / f"class_{label:02d}"
            folder.mkdir(exist_ok=True)
            image = Image.fromarray(synthetic_image(sample_id, size, seed), mode="RGB")
            image.save(folder / f"{sample_id:07d}{ext}", **options)
    logger.info("wrote %d synthetic %s images to %s", count, fmt, root)
    return root


CORRUPTIONS = ("empty", "garbage", "truncated")


def corrupt_files(paths: list[Path], seed: int = 0) -> dict[str, str]:
    """Break ``paths`` in place, cycling through :data:`CORRUPTIONS` (zero bytes, random bytes,
    the first third of the file); returns path → kind. For bad-sample tests and benchmarks."""
    kinds = {}
    for n, path in enumerate(paths):
        kind = CORRUPTIONS[n % len(CORRUPTIONS)]
        data = Path(path).read_bytes()
        Path(path).write_bytes(b"" if kind == "empty" else
                               np.random.default_rng([seed, n]).bytes(300) if kind == "garbage"
                               else data[: len(data) // 3])
        kinds[str(path)] = kind
    return kinds
