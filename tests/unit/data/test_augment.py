"""Augmentation is a function of (seed, epoch, sample id): not of batch, order or rank."""

import torch

from pipeline.data.augment import augment, uniforms
from pipeline.data.config import AugmentConfig

CIFAR = AugmentConfig(hflip=0.5, crop_padding=4)


def images(ids: torch.Tensor) -> torch.Tensor:
    """Distinct, asymmetric images: each a function of its id."""
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(int(ids.max()) + 1, 3, 16, 12, generator=gen)
    return table[ids]


def test_a_sample_gets_the_same_augmentation_in_any_batch_and_order():
    ids = torch.arange(100, 164)
    whole = augment(images(ids), ids, seed=7, epoch=3, config=CIFAR)
    perm = torch.randperm(64, generator=torch.Generator().manual_seed(1))
    shuffled = augment(images(ids[perm]), ids[perm], seed=7, epoch=3, config=CIFAR)
    assert torch.equal(shuffled, whole[perm])
    half = augment(images(ids[10:20]), ids[10:20], seed=7, epoch=3, config=CIFAR)
    assert torch.equal(half, whole[10:20])


def test_epochs_and_seeds_change_the_draws():
    ids = torch.arange(1000)
    base = uniforms(0, 0, ids, 3)
    assert not torch.equal(base, uniforms(0, 1, ids, 3))
    assert not torch.equal(base, uniforms(1, 0, ids, 3))
    assert torch.equal(base, uniforms(0, 0, ids, 3))


def test_draws_are_uniform_and_independent_of_neighbouring_ids():
    u = uniforms(0, 0, torch.arange(20_000), 3)
    assert ((u >= 0) & (u < 1)).all()
    for column in u.T:
        counts = torch.histc(column, bins=10, min=0, max=1)
        assert (counts - 2000).abs().max() < 200  # ~4.7 sigma of a binomial(20000, 0.1)
    # consecutive ids: flips agree about half the time, not in a pattern
    flips = u[:, 0] < 0.5
    assert abs((flips[1:] == flips[:-1]).float().mean().item() - 0.5) < 0.03
    # large ids (beyond 32 bits) are mixed too
    big = uniforms(0, 0, torch.arange(1 << 40, (1 << 40) + 1000), 1)
    assert 0.4 < (big < 0.5).float().mean().item() < 0.6


def test_flip_and_crop_do_what_they_say():
    ids = torch.arange(32)
    x = images(ids)
    assert torch.equal(augment(x, ids, seed=0, epoch=0, config=AugmentConfig()), x)
    flipped = augment(x, ids, seed=0, epoch=0, config=AugmentConfig(hflip=1.0))
    assert torch.equal(flipped, x.flip(-1))
    cropped = augment(x, ids, seed=0, epoch=0, config=AugmentConfig(crop_padding=2))
    assert cropped.shape == x.shape
    shifts = uniforms(0, 0, ids, 3)[:, 1:].mul(5).long() - 2  # the (dy, dx) of each sample
    for i, (dy, dx) in enumerate(shifts.tolist()):
        # the output pixel (r, c) is the input pixel (r + dy, c + dx), zero outside
        r, c = 5, 5
        assert cropped[i, :, r, c].equal(x[i, :, r + dy, c + dx])
    assert (shifts != 0).any(dim=1).float().mean() > 0.5  # most samples move
