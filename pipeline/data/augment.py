"""Random augmentation that is a pure function of (seed, epoch, sample id), applied on the device.

Ray Data decodes deterministically on CPU workers, so a re-executed task (a killed actor, a lost
node) yields the same rows. The random part runs in the Train worker on the device batch, with
per-sample draws from a counter-based hash of ``(data.seed, epoch, id)``: no generator state,
so a sample gets the same flip and crop whichever rank, batch or position it lands in, before
or after a restart, and different ones each epoch. Integer ops only, so CPU and CUDA agree.

::

    data:
      augment: {hflip: 0.5, crop_padding: 4}   # the CIFAR recipe
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pipeline.data.config import AugmentConfig

_MASK = 0xFFFFFFFF


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mix (xor-shift-multiply) on int64 tensors holding values < 2**32."""
    x = x & _MASK
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK
    x = ((x ^ (x >> 16)) * 0x45D9F3B) & _MASK
    return x ^ (x >> 16)


def uniforms(seed: int, epoch: int, ids: torch.Tensor, draws: int) -> torch.Tensor:
    """``(len(ids), draws)`` floats in [0, 1), each a function of (seed, epoch, id, draw) only."""
    ids = ids.to(torch.int64)
    key = _hash32(_hash32(torch.tensor(seed & _MASK, device=ids.device)) ^ (epoch & _MASK))
    per_id = _hash32(_hash32(key ^ (ids & _MASK)) ^ _hash32(ids >> 32))
    draw = torch.arange(1, draws + 1, device=ids.device) * 0x9E3779B9
    return _hash32(per_id[:, None] ^ draw[None, :]).to(torch.float64).div(2.0 ** 32).float()


def augment(images: torch.Tensor, ids: torch.Tensor, *, seed: int, epoch: int,
            config: AugmentConfig) -> torch.Tensor:
    """Flip and crop ``images`` (N, C, H, W) sample by sample; ``ids`` (N,) on the same device."""
    if not config.enabled or len(images) == 0:
        return images
    u = uniforms(seed, epoch, ids, 3)
    if config.hflip > 0:
        flip = (u[:, 0] < config.hflip)[:, None, None, None]
        images = torch.where(flip, images.flip(-1), images)
    pad = config.crop_padding
    if pad > 0:
        n, _, height, width = images.shape
        shift = (u[:, 1:] * (2 * pad + 1)).long()  # 0 .. 2*pad: the crop's corner in the padding
        padded = F.pad(images, (pad, pad, pad, pad)).permute(0, 2, 3, 1)  # N, H+2p, W+2p, C
        rows = shift[:, 0, None] + torch.arange(height, device=images.device)
        cols = shift[:, 1, None] + torch.arange(width, device=images.device)
        batch = torch.arange(n, device=images.device)[:, None, None]
        images = padded[batch, rows[:, :, None], cols[:, None, :]].permute(0, 3, 1, 2)
    return images.contiguous()
