import numpy as np
import pytest
from PIL import Image


def write_folder(root, per_class=4, classes=("cat", "dog"), size=(12, 10), mode="RGB", fmt="png"):
    rng = np.random.default_rng(0)
    for name in classes:
        (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            pixels = rng.integers(0, 256, shape, dtype=np.uint8)
            Image.fromarray(pixels, mode=mode).save(root / name / f"{i}.{fmt}")
    return root


@pytest.fixture
def image_folder(tmp_path):
    return write_folder(tmp_path / "images")
