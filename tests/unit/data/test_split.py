import numpy as np

from pipeline.data import validation_mask


def test_split_is_deterministic_and_close_to_fraction():
    ids = np.arange(20_000)
    mask = validation_mask(ids, 0.2, seed=7)
    assert np.array_equal(mask, validation_mask(ids, 0.2, seed=7))
    assert abs(mask.mean() - 0.2) < 0.01


def test_split_depends_on_id_not_position():
    ids = np.arange(1000)
    shuffled = np.random.default_rng(1).permutation(ids)
    assert np.array_equal(validation_mask(ids, 0.3, 0)[shuffled], validation_mask(shuffled, 0.3, 0))


def test_seed_changes_split_and_zero_fraction_is_empty():
    ids = np.arange(1000)
    assert not np.array_equal(validation_mask(ids, 0.5, 0), validation_mask(ids, 0.5, 1))
    assert not validation_mask(ids, 0.0, 0).any()
