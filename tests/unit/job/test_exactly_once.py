"""``summary.json``'s ``exactly_once`` needs every epoch's accounting, not only clean entries."""

from pipeline.job.runner import _exactly_once


def epoch(number: int, lost: int = 0, duplicated: int = 0) -> dict:
    return {"epoch": number, "lost": lost, "duplicated": duplicated}


def test_every_epoch_clean_is_exactly_once():
    assert _exactly_once([epoch(1), epoch(2), epoch(3)], epochs=3) is True


def test_a_missing_epoch_is_not_exactly_once():
    # e.g. a run resumed after epoch 1 whose summary lost epoch 1's accounting
    assert _exactly_once([epoch(2), epoch(3)], epochs=3) is False


def test_a_lost_or_repeated_sample_is_not_exactly_once():
    assert _exactly_once([epoch(1), epoch(2, lost=1)], epochs=2) is False
    assert _exactly_once([epoch(1, duplicated=2), epoch(2)], epochs=2) is False


def test_unknown_ids_say_nothing():
    assert _exactly_once([], epochs=2) is None
