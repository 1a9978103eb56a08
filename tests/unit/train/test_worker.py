"""The worker loop over several epochs, driven by fakes on a virtual clock (fake_worker.py):
what it tells the driver, when it checkpoints, and where it stops a diverged run."""

import numpy as np
import pytest

from pipeline.messages import EpochClosed, EpochDone, EpochProgress, ProfileTail, RankWait
from pipeline.train.checkpoint import Resume
from pipeline.train.reshuffle import Group
from pipeline.train.step import NonFiniteLossError
from tests.unit.train.fake_worker import BATCH, ClockedTask, Epoch, worker

EPOCHS = 3


def test_each_epoch_reports_once_checkpoints_once_and_the_run_ends_with_its_profile_tail():
    plans = [Epoch(steps=6, data_wait=0.3) for _ in range(EPOCHS)]  # ~2 s of steps an epoch
    w, driver, _ = worker(plans)
    w.run()
    done = driver.of(EpochDone)
    assert [m.epoch for m in done] == [1, 2, 3]
    for e, m in enumerate(done):
        assert m.rank_samples == 6 * BATCH and m.line["samples"] == 6 * BATCH
        assert m.ids.tolist() == list(range(e * 6 * BATCH, (e + 1) * 6 * BATCH))
        assert m.line["steps"] == 6 and m.line["first_batch_seconds"] == pytest.approx(1.0)
        assert m.profile["epoch"] == e + 1 and m.profile["steps"] == 6
    # each epoch: its report, then (after the checkpoint) its validation
    closes = [m for m in driver.messages if isinstance(m, (EpochDone, EpochClosed))]
    assert [(type(m), m.epoch) for m in closes] == [
        (kind, e) for e in (1, 2, 3) for kind in (EpochDone, EpochClosed)]
    # the run's last message: the profile's tail (the last report, checkpoint and validation)
    assert isinstance(driver.messages[-1], ProfileTail)
    assert [s["epoch"] for s in w.saves] == [1, 2, 3] and {s["step"] for s in w.saves} == {0}
    # progress about once a second, counted from each epoch's first step
    progress = driver.of(EpochProgress)
    assert {m.epoch for m in progress} == {0, 1, 2}
    assert all(0 < m.samples <= 6 * BATCH for m in progress)


def test_the_pool_hears_each_ranks_wait_and_samples_without_the_first_step_and_at_every_pass_end():
    plans = [Epoch(steps=8, data_wait=0.25, startup=3.0) for _ in range(EPOCHS)]
    w, driver, _ = worker(plans)
    w.run()
    pulses = driver.of(RankWait)
    ends = [p for p in pulses if p.epoch_done is not None]
    assert [p.epoch_done for p in ends] == [1, 2, 3]
    per_epoch = []
    for e in range(EPOCHS):  # every pulse up to and including the epoch's end
        first = pulses.index(ends[e - 1]) + 1 if e else 0
        per_epoch.append(pulses[first:pulses.index(ends[e]) + 1])
    for chunk in per_epoch:
        # steps 2..8 waited 0.25 s each; the 3 s start-up is not the pipeline's pace
        assert sum(p.steps for p in chunk) == 7
        assert sum(p.samples for p in chunk) == 7 * BATCH  # the trainers' pace: rows per step
        assert sum(p.wait_s for p in chunk) == pytest.approx(7 * 0.25)
        assert len(chunk) >= 2  # at least one pulse within the epoch and the end


def test_a_streamed_epoch_waits_for_the_pools_verdict_on_the_one_before():
    """data.autoscale: the next execution's pool is the verdict's on the last epoch, so each
    rank waits for it before streaming the next epoch (the multi-node run's pool shrank 4 -> 2
    at an epoch's end and ran the next epoch at 4: without validation the next execution
    started before the verdict)."""
    plans = [Epoch(steps=4) for _ in range(EPOCHS)]
    w, driver, script = worker(plans)
    asked = []

    def verdict(epoch):  # the driver takes half a second to judge
        asked.append((epoch, len(driver.of(EpochClosed)), len(driver.of(EpochDone))))
        script.clock.advance(0.5)

    w.pool_verdict = verdict
    w.run()
    # after epoch e's validation, before epoch e + 1 trains; never before the first
    assert asked == [(1, 1, 1), (2, 2, 2)]
    # a resumed run: nothing to wait for before its first epoch (another run judged the last)
    w, driver, script = worker(plans)
    w.pool_verdict, asked = verdict, []
    w.run(Resume(epoch=1, consumed=np.arange(0), step=0))
    assert [e for e, *_ in asked] == [2]
    # an epoch that replays the cache decodes nothing: no pool to wait for
    w, driver, script = worker(plans)
    w.pool_verdict, asked = verdict, []
    w.train.replays, w.train.group = True, Group((0,), "one rank")  # dealt already
    w.run()
    assert asked == []


def test_mid_epoch_checkpoints_hold_every_id_so_far_and_pause_in_a_resumed_epoch():
    plans = [Epoch(steps=5) for _ in range(EPOCHS)]
    w, _, _ = worker(plans, checkpoint_every=2)
    w.epoch(0)
    mid = [s for s in w.saves if s["step"]]
    assert [s["step"] for s in mid] == [2, 4]
    assert mid[0]["consumed"].tolist() == list(range(2 * BATCH))
    assert mid[1]["consumed"].tolist() == list(range(4 * BATCH))
    # a resumed epoch: the ranks' steps differ (each skips its own ids), so it saves at its end
    w.saves.clear()
    w.epoch(1, consumed=np.arange(3))
    assert [s["step"] for s in w.saves] == [0]
    w.saves.clear()
    w.epoch(2)
    assert [s["step"] for s in w.saves] == [2, 4, 0]


class DivergingTask(ClockedTask):
    def __init__(self, script, at_epoch):
        super().__init__(script)
        self.at_epoch = at_epoch

    def loss(self, model, batch):
        loss = super().loss(model, batch)
        return loss * float("nan") if self.script.epoch == self.at_epoch else loss


def test_a_diverged_epoch_stops_before_validation_and_its_checkpoint():
    plans = [Epoch(steps=4) for _ in range(EPOCHS)]
    w, driver, script = worker(plans)
    w.stepper.task = DivergingTask(script, at_epoch=1)
    said = []
    w.stepper.on_diverged = said.append
    with pytest.raises(NonFiniteLossError, match=r"NaN or infinite in 4 step\(s\) by epoch 2"):
        w.run()
    # epoch 1 reported and saved; epoch 2 neither: no checkpoint holds diverged weights
    assert [m.epoch for m in driver.of(EpochDone)] == [1]
    assert [s["epoch"] for s in w.saves] == [1]
    assert len(said) == 1


def test_a_stop_during_validation_finds_the_epoch_reported_and_checkpointed():
    plans = [Epoch(steps=4) for _ in range(EPOCHS)]
    w, driver, script = worker(plans)
    validate = w.val.epoch

    def stopped_in_epoch_2(epoch, skip=None):
        if epoch == 1:
            raise KeyboardInterrupt  # Ctrl-C while epoch 2 validates
        return validate(epoch, skip)

    w.val.epoch = stopped_in_epoch_2
    with pytest.raises(KeyboardInterrupt):
        w.run()
    # the driver has epoch 2's ids and a checkpoint holds its weights: the rerun starts epoch 3
    assert [m.epoch for m in driver.of(EpochDone)] == [1, 2]
    assert [s["epoch"] for s in w.saves] == [1, 2]
    assert [m.epoch for m in driver.of(EpochClosed)] == [1]
