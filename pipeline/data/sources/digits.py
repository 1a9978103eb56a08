"""scikit-learn's 1,797 real handwritten digits, written once as 32x32 PNG files.

They are then read exactly like any image folder, so the quickstart exercises real file reads
and PNG decoding. Writing goes to a temporary folder renamed into place, so two runs starting at
once never see a half-written cache.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from pipeline.config import ConfigError
from pipeline.data.sources.base import SourcePlan
from pipeline.data.sources.image_folder import plan_image_folder
from pipeline.data.sources.publish import is_complete, publish_once

logger = logging.getLogger(__name__)

DIGIT_COUNT = 1797


def write_digits(cache_dir: str | Path) -> Path:
    """Write the digits as ROOT/<digit>/<index>.png once; return ROOT."""
    root = Path(cache_dir).expanduser()
    if is_complete(root):
        return root
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ConfigError(["data.source.kind (digits) needs scikit-learn; install it with "
                           "pip install 'feedline[digits]'"]) from exc
    from PIL import Image

    digits = load_digits()
    with publish_once(root, ".digits-") as tmp:
        for index, (image, target) in enumerate(zip(digits.images, digits.target, strict=True)):
            pixels = np.clip(image * (255.0 / 16.0), 0, 255).astype(np.uint8)
            big = Image.fromarray(pixels, mode="L").resize((32, 32), Image.Resampling.BILINEAR)
            (tmp / str(target)).mkdir(exist_ok=True)
            big.save(tmp / str(target) / f"{index:04d}.png")
    logger.info("wrote %d digit images to %s", DIGIT_COUNT, root)
    return root


def plan_digits(cache_dir: str) -> SourcePlan:
    return plan_image_folder(write_digits(cache_dir), field="data.source.cache_dir")
