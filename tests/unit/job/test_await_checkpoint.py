"""A stop keeps the epoch the ranks reported: the driver waits (bounded) for Ray Train to register
its checkpoint before aborting. The snapshot and meta.json are a real run's (Ray 2.60, epoch 1 of
the quickstart), in ``fixtures/``."""

import json
import shutil
from pathlib import Path

from pipeline.job.runner import KEEP_EPOCH_S, await_checkpoint, last_checkpoint

FIXTURES = Path(__file__).parent / "fixtures"


class FakeClock:
    """Time moves only when the code under test sleeps; ``at`` runs a callback at a time."""

    def __init__(self, events=()):
        self.now = 0.0
        self.events = sorted(events)

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        while self.events and self.events[0][0] <= self.now:
            self.events.pop(0)[1]()


def register(output: Path) -> None:
    """What Ray Train's controller leaves when it registers epoch 1's checkpoint."""
    train = output / "ray" / "train"
    snapshot = json.loads((FIXTURES / "checkpoint_manager_snapshot.json").read_text())
    folder = train / snapshot["latest_checkpoint_result"]["checkpoint_dir_name"]
    folder.mkdir(parents=True)
    shutil.copy(FIXTURES / "checkpoint_meta.json", folder / "meta.json")
    (train / "checkpoint_manager_snapshot.json").write_text(json.dumps(snapshot))


def test_it_returns_once_the_epochs_checkpoint_is_registered(tmp_path):
    clock = FakeClock([(0.3, lambda: register(tmp_path))])  # the controller's next poll
    assert await_checkpoint(tmp_path, 1, clock=clock, sleep=clock.sleep)
    assert 0.3 <= clock.now < 0.4
    assert last_checkpoint(tmp_path)["epoch"] == 1


def test_an_earlier_epochs_checkpoint_is_not_enough_and_the_wait_is_bounded(tmp_path):
    register(tmp_path)  # epoch 1 registered; epoch 2 never comes (a controller that is gone)
    clock = FakeClock()
    assert not await_checkpoint(tmp_path, 2, clock=clock, sleep=clock.sleep)
    assert KEEP_EPOCH_S <= clock.now < KEEP_EPOCH_S + 0.1
    clock = FakeClock()
    assert await_checkpoint(tmp_path, 1, clock=clock, sleep=clock.sleep) and clock.now == 0


def test_no_snapshot_yet_waits_too(tmp_path):
    clock = FakeClock()
    assert not await_checkpoint(tmp_path, 1, timeout_s=1.0, clock=clock, sleep=clock.sleep)
    assert 1.0 <= clock.now < 1.1


def test_a_snapshot_naming_a_deleted_checkpoint_is_no_checkpoint_yet(tmp_path):
    """Ray Train deletes checkpoints beyond num_to_keep as it registers newer ones: a snapshot
    read just before names a folder that is gone (seen when SIGTERM came mid-epoch with
    train.checkpoint_every). The wait goes on until the snapshot names one that is there."""
    register(tmp_path)
    train = tmp_path / "ray" / "train"
    folder = train / json.loads((train / "checkpoint_manager_snapshot.json").read_text())[
        "latest_checkpoint_result"]["checkpoint_dir_name"]
    shutil.rmtree(folder)
    assert last_checkpoint(tmp_path) is None
    clock = FakeClock([(0.5, lambda: register(tmp_path))])
    assert await_checkpoint(tmp_path, 1, clock=clock, sleep=clock.sleep)
    assert 0.5 <= clock.now < 0.6
