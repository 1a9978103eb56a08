"""``ship_uint8``: images cross PCIe as uint8 and become normalised float32 on the device.

A float32 image is 4× the bytes of its uint8 source, so converting after the copy cuts host→device
traffic by 4×. The conversion is exactly ``(x / 255 - mean[c]) / std[c]`` in float32, evaluated
in that order so a reference computed the same way on the same device is bit-equal. Specs are
checked when the feeder is built; each batch's field is checked (uint8, N×C×H×W, C matching)
before it is copied, so a wrong field fails with its name instead of producing garbage.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class Uint8Normalize:
    """Per-channel normalisation of one uint8 N×C×H×W field (plain data; picklable)."""

    field: str
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def check(self, value: Any) -> None:
        """Raise ``TypeError``/``ValueError`` naming the field when ``value`` does not fit."""
        dtype = value.dtype
        is_uint8 = dtype == (torch.uint8 if isinstance(value, torch.Tensor) else np.uint8)
        if not is_uint8:
            raise TypeError(
                f"uint8_normalize[{self.field!r}]: field is {dtype}, expected uint8; ship the "
                "image as uint8 from the data stage or drop it from uint8_normalize")
        shape = tuple(value.shape)
        if len(shape) != 4 or shape[1] != len(self.mean):
            raise ValueError(
                f"uint8_normalize[{self.field!r}]: field has shape {shape}, expected N×C×H×W "
                f"with C={len(self.mean)} (the length of mean/std); transpose NHWC to NCHW in "
                "the data stage or fix mean/std")

    def apply(self, x: torch.Tensor, mean: torch.Tensor, std: torch.Tensor) -> torch.Tensor:
        """float32 ``(x / 255 - mean) / std`` with ``mean``/``std`` shaped (1, C, 1, 1)."""
        return x.to(torch.float32).div_(255.0).sub_(mean).div_(std)

    def constants(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """``mean`` and ``std`` as float32 (1, C, 1, 1) tensors on ``device``."""
        shape = (1, len(self.mean), 1, 1)
        mean = torch.tensor(self.mean, dtype=torch.float32).view(shape).to(device)
        std = torch.tensor(self.std, dtype=torch.float32).view(shape).to(device)
        return mean, std


def parse_uint8_normalize(
    spec: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None,
) -> dict[str, Uint8Normalize]:
    """Validate ``{field: (mean_per_channel, std_per_channel)}``; raise naming the bad entry."""
    if spec is None:
        return {}
    if not isinstance(spec, Mapping):
        raise TypeError(
            f"uint8_normalize ({type(spec).__name__}) must be a mapping "
            "{field: (mean_per_channel, std_per_channel)}, e.g. {'image': ((0.5,)*3, (0.25,)*3)}")
    out = {}
    for name, pair in spec.items():
        try:
            mean, std = pair
            mean, std = tuple(float(m) for m in mean), tuple(float(s) for s in std)
        except (TypeError, ValueError) as exc:
            raise ValueError(
                f"uint8_normalize[{name!r}] ({pair!r}) must be (mean_per_channel, "
                "std_per_channel), two sequences of numbers") from exc
        if not mean or len(mean) != len(std):
            raise ValueError(
                f"uint8_normalize[{name!r}]: mean has {len(mean)} values and std {len(std)}; "
                "give one value per channel in each")
        if any(not math.isfinite(s) or s == 0 for s in std) or not all(map(math.isfinite, mean)):
            raise ValueError(
                f"uint8_normalize[{name!r}]: std ({std}) must be finite and non-zero and mean "
                f"({mean}) finite")
        out[str(name)] = Uint8Normalize(field=str(name), mean=mean, std=std)
    return out
