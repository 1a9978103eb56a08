import numpy as np

from pipeline.data.accounting import account_epoch


def test_exactly_once_across_ranks():
    result = account_epoch(np.arange(10), [np.array([0, 2, 4, 6, 8]), np.array([1, 3, 5, 7, 9])],
                           quarantined=[], world_size=2)
    assert (result["lost"], result["duplicated"], result["unique"]) == (0, 0, 10)


def test_duplicates_lost_quarantined_and_remainder():
    delivered = [np.array([0, 1, 2, 2]), np.array([3, 4])]
    result = account_epoch(np.arange(9), delivered, quarantined=[5, 99], world_size=2)
    assert result["duplicated"] == 1 and result["quarantined"] == 1
    assert result["lost"] == 3 and result["lost_ids"] == [6, 7, 8]
    one_short = account_epoch(np.arange(5), [np.array([0, 1]), np.array([2, 3])],
                              quarantined=[], world_size=2)
    assert one_short["lost"] == 0 and one_short["split_remainder"] == [4]


def test_ids_from_outside_the_split_are_flagged():
    result = account_epoch(np.arange(3), [np.array([0, 1, 2, 7])], quarantined=[], world_size=1)
    assert result["unknown"] == 1
