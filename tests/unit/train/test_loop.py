"""The loop's training and validation passes driven without Ray: a real DeviceFeeder over
in-memory batches (the host batches Ray Data yields), the real profiler, the loop's own
``_build``; what a step does is checked against what the task's loss implies. (The whole
worker, epochs and all, on a virtual clock: tests/unit/train/test_worker.py.)"""

import numpy as np
import pytest
import torch

from pipeline.profile import StepProfiler
from pipeline.train.context import TaskContext
from pipeline.train.evaluate import all_counts, evaluate, task_metrics
from pipeline.train.loop import _build
from pipeline.train.ranks import Ranks
from pipeline.train.task import ClassificationTask
from pipeline.transfer import DeviceFeeder
from tests.unit.train.loop_fixtures import batches, merged, one_pass, spec
from tests.unit.train.tasks import CountingSGD, RecordingClassification, WeightedSumTask

CPU = torch.device("cpu")


def run_epoch(worker_spec, host, *, finish=True):
    prof = StepProfiler(rank=0, device=CPU)
    stepper = _build(worker_spec, CPU, 1, prof)
    with DeviceFeeder(host, device="cpu") as feeder:
        result = one_pass(feeder, stepper, prof, worker_spec)
    if finish:
        stepper.finish_epoch(result.steps % stepper.accum)
    return stepper, prof, result


def params(model):
    return [p.detach().clone() for p in model.parameters()]


def test_the_task_loss_drives_the_update_and_the_task_optimizer_steps():
    host = batches([5, 3])
    lr = 0.1
    stepper, _, done = run_epoch(spec(WeightedSumTask(), lr=lr), host)
    start = WeightedSumTask().build_model(TaskContext((4,), 3, train=None))
    # dL/dW[j] = Σ_i label_i x_i and dL/db[j] = Σ_i label_i, whatever the weights
    dw = sum(torch.from_numpy(b["features"].T @ b["label"].astype(np.float32)) for b in host)
    db = float(sum(b["label"].sum() for b in host))
    model = stepper.model
    assert isinstance(stepper.optimizer, CountingSGD) and stepper.optimizer.steps == 2
    assert torch.allclose(model.weight, start.weight - lr * dw.expand(3, 4), atol=1e-5)
    assert torch.allclose(model.bias, start.bias - lr * db, atol=1e-5)
    # the reported loss is the task's, each batch at the weights it met
    first = WeightedSumTask().loss(start, {k: torch.from_numpy(v) for k, v in host[0].items()})
    with torch.no_grad():
        start.weight -= lr * torch.from_numpy(host[0]["features"].T
                                              @ host[0]["label"].astype(np.float32))
        start.bias -= lr * float(host[0]["label"].sum())
    second = WeightedSumTask().loss(start, {k: torch.from_numpy(v) for k, v in host[1].items()})
    assert done.loss_sum == pytest.approx(float((first + second).detach()), rel=1e-5)
    assert (done.samples, done.steps) == (8, 2) and done.ids.tolist() == list(range(8))


def test_classification_through_the_loop_is_todays_loop():
    """CrossEntropyLoss, SGD with momentum 0.9 and channels-last images, as the loop did before
    the task API."""
    host = batches([4, 4, 2], field="image", shape=(1, 8, 8))
    worker_spec = spec(ClassificationTask(), field="image", shape=(1, 8, 8), model="cnn",
                       lr=0.05)
    torch.manual_seed(0)
    stepper, _, done = run_epoch(worker_spec, host)

    from pipeline.train.models import build_model
    torch.manual_seed(0)
    model = build_model("cnn", input_shape=(1, 8, 8), num_classes=3).to(
        memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = 0.0
    for b in host:
        x = torch.from_numpy(b["image"]).contiguous(memory_format=torch.channels_last)
        loss = torch.nn.CrossEntropyLoss()(model(x), torch.from_numpy(b["label"]))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses += float(loss.detach())
    for mine, theirs in zip(stepper.model.parameters(), model.parameters(), strict=True):
        assert torch.equal(mine, theirs)
    assert done.loss_sum == pytest.approx(losses, rel=1e-6)


@pytest.mark.parametrize("sizes,accum,groups", [
    ([8, 8], 2, [2]),              # two micro-steps = one step on 16 rows
    ([8, 8, 8, 8], 2, [2, 2]),     # twice, momentum carried between them
    ([6, 6, 6, 6, 6], 2, [2, 2, 1]),  # the epoch's last, partial group steps at its end
])
def test_accumulated_micro_steps_equal_one_big_step(sizes, accum, groups):
    host = batches(sizes)
    torch.manual_seed(0)
    small, prof, done = run_epoch(
        spec(ClassificationTask(), model="mlp", grad_accum_steps=accum), host)
    torch.manual_seed(0)
    big, _, _ = run_epoch(spec(ClassificationTask(), model="mlp"), merged(host, groups))
    steps = done.steps
    assert steps == len(sizes)
    for mine, theirs in zip(small.model.parameters(), big.model.parameters(), strict=True):
        assert torch.allclose(mine, theirs, atol=1e-6)
    # the optimizer span only on the micro-steps that end a group
    stepped = sorted(e["args"]["step"] for e in prof.trace_events() if e["name"] == "optimizer")
    assert stepped == [i for i in range(steps) if (i + 1) % accum == 0]


def test_without_the_final_flush_a_partial_group_would_be_lost():
    host = batches([6, 6, 6])
    stepper, _, _ = run_epoch(spec(WeightedSumTask(), grad_accum_steps=2), host, finish=False)
    assert stepper.optimizer.steps == 1
    assert stepper.finish_epoch(1) and stepper.optimizer.steps == 2
    assert not stepper.finish_epoch(0)  # nothing pending: no step


def test_bf16_autocasts_forward_and_loss_on_cpu():
    task = RecordingClassification()
    host = batches([8, 8])
    torch.manual_seed(0)
    worker_spec = spec(task, model="mlp", precision="bf16", lr=0.1)
    prof = StepProfiler(rank=0, device=CPU)
    stepper = _build(worker_spec, CPU, 1, prof)
    before = params(stepper.model)
    with DeviceFeeder(host, device="cpu") as feeder:
        done = one_pass(feeder, stepper, prof, worker_spec)
    assert task.logit_dtypes == [torch.bfloat16, torch.bfloat16]
    assert np.isfinite(done.loss_sum)
    after = params(stepper.model)
    assert all(p.dtype == torch.float32 for p in after)  # weights stay fp32
    assert all(not torch.equal(a, b) for a, b in zip(before, after, strict=True))
    fp32 = RecordingClassification()
    run_epoch(spec(fp32, model="mlp"), host)
    assert fp32.logit_dtypes == [torch.float32, torch.float32]


def test_bf16_images_with_augmentation():
    host = batches([4, 4], field="image", shape=(1, 8, 8))
    task = RecordingClassification()
    _, _, done = run_epoch(
        spec(task, field="image", shape=(1, 8, 8), model="cnn", precision="bf16", augment=True),
        host)
    assert np.isfinite(done.loss_sum) and task.logit_dtypes == [torch.bfloat16] * 2


def test_grad_clipping_caps_the_update():
    host = batches([16])
    lr, clip = 1.0, 0.5
    start = WeightedSumTask().build_model(TaskContext((4,), 3, train=None))
    moved = []
    for norm in (clip, 0.0):
        stepper, _, _ = run_epoch(spec(WeightedSumTask(), lr=lr, grad_clip_norm=norm), host)
        delta = torch.cat([(a - b).reshape(-1) for a, b in
                           zip(stepper.model.parameters(), start.parameters(), strict=True)])
        moved.append(float(delta.detach().norm()))
    assert moved[0] == pytest.approx(lr * clip, rel=1e-5)  # plain SGD: step = lr × clipped grad
    assert moved[1] > 10 * lr * clip  # unclipped, the same batch moves much further


def test_the_schedule_steps_once_per_optimizer_step():
    host = batches([8, 8, 8, 8])
    worker_spec = spec(ClassificationTask(), model="mlp", lr=0.2, lr_schedule="cosine",
                       grad_accum_steps=2, batch_size=8, num_train=32, epochs=2)
    stepper, _, _ = run_epoch(worker_spec, host)
    # 32 rows, batches of 8, groups of 2: 2 optimizer steps an epoch, 4 in the run
    assert stepper.scheduler.last_epoch == 2
    assert stepper.optimizer.param_groups[0]["lr"] == pytest.approx(0.1)  # halfway: cos(π/2)


def test_validation_sums_the_task_counts_into_its_metrics():
    host = batches([5, 7, 4])
    torch.manual_seed(0)
    stepper = _build(spec(ClassificationTask(), model="mlp"), CPU, 1,
                     StepProfiler(rank=0, device=CPU, enabled=False))
    with DeviceFeeder(host, device="cpu") as feeder:
        sums = evaluate(stepper, feeder, "features")
    totals = all_counts(sums, Ranks(CPU))
    with torch.no_grad():
        x = torch.from_numpy(np.concatenate([b["features"] for b in host]))
        y = torch.from_numpy(np.concatenate([b["label"] for b in host]))
        correct = int((stepper.model(x).argmax(dim=1) == y).sum())
    assert totals == {"correct": correct, "total": 16.0}
    assert task_metrics(stepper.task, totals, reserved={"epoch", "samples"}) == {
        "val_accuracy": correct / 16, "val_samples": 16}
    assert stepper.model.training  # back in training mode


def test_a_task_metric_may_not_shadow_the_loops():
    class Shadowing(ClassificationTask):
        def eval_metrics(self, totals):
            return {"samples": 3.0}

    with pytest.raises(ValueError, match=r"eval_metrics returned samples, which the loop reports"
                                         r" itself; name the task's metrics val_\*"):
        task_metrics(Shadowing(), {}, reserved={"epoch", "samples"})


def test_a_model_that_is_not_a_module_is_refused():
    class Broken(ClassificationTask):
        def build_model(self, *, input_shape, num_classes, config):
            return lambda x: x

    with pytest.raises(TypeError, match=r"Broken.build_model returned function, not an "
                                        r"nn.Module"):
        _build(spec(Broken()), CPU, 1, StepProfiler(rank=0, device=CPU, enabled=False))


@pytest.mark.timeout(180)
def test_accumulation_under_ddp_all_reduces_once_a_group_and_matches_one_big_step(tmp_path):
    from tests.unit.collective.collective_workers import spawn
    from tests.unit.train import ddp_workers

    ranks = spawn(ddp_workers.accumulate, tmp_path)
    assert [r["steps"] for r in ranks] == [3, 3] and all(r["stepped_at_end"] for r in ranks)
    # micro-steps 1 and 3 ran under no_sync: DDP all-reduced on micro-step 2 only; the
    # half group at the end went through finish_epoch's own all-reduce
    assert [r["all_reduces"] for r in ranks] == [1, 1]
    assert ranks[0]["weights"] == ranks[1]["weights"]
    # one process, rank 0's initial weights, every group's rows of both ranks in one batch
    host = batches(ddp_workers.SIZES)
    torch.manual_seed(0)
    big, _, _ = run_epoch(spec(ClassificationTask(), model="mlp"),
                          merged([host[i] for i in (0, 1, 2, 3, 4, 5)], [4, 2]))
    for mine, theirs in zip(ranks[0]["weights"], big.model.parameters(), strict=True):
        assert torch.allclose(torch.tensor(mine), theirs.detach().reshape(-1), atol=1e-6)


def test_the_custom_task_example_trains_through_the_loop():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[3] / "examples" / "custom_task.py"
    module_spec = importlib.util.spec_from_file_location("custom_task_example", path)
    example = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(example)  # main() is not run

    host = batches([8, 8], field="image", shape=(1, 8, 8))
    task = example.SmoothedClassification(smoothing=0.2)
    stepper, _, done = run_epoch(
        spec(task, field="image", shape=(1, 8, 8), model="cnn", lr_schedule="cosine",
             num_train=16, batch_size=8), host)
    assert isinstance(stepper.optimizer, torch.optim.AdamW)
    assert [g["weight_decay"] for g in stepper.optimizer.param_groups] == [0.05, 0.0]
    assert np.isfinite(done.loss_sum) and stepper.scheduler.last_epoch == 2
    with DeviceFeeder(host, device="cpu") as feeder:
        totals = all_counts(evaluate(stepper, feeder, "image"), Ranks(CPU))
    metrics = task_metrics(task, totals, reserved={"samples"})
    assert metrics["val_samples"] == 16
    assert metrics["val_accuracy"] <= metrics["val_top2_accuracy"] <= 1.0


def test_a_loss_that_is_not_one_number_names_the_task_and_the_remedy():
    class PerSample(ClassificationTask):
        def loss(self, model, batch):
            return torch.nn.functional.cross_entropy(model(batch["features"]), batch["label"],
                                                     reduction="none")

    with pytest.raises(ValueError, match=r"PerSample.loss returned a tensor of shape \(5,\); it "
                                         r"must return one number to minimise: reduce it"):
        run_epoch(spec(PerSample(), model="mlp"), batches([5]))


def test_a_checkpoint_of_another_model_says_what_changed_and_what_to_do():
    from pipeline.train import checkpoint

    small = torch.nn.Linear(4, 3)
    saved = checkpoint.state(small, torch.optim.SGD(small.parameters(), lr=0.1), None,
                             epoch=1, step=0, consumed=np.empty(0, np.int64))
    bigger = torch.nn.Linear(4, 5)
    with pytest.raises(ValueError, match=r"the checkpoint does not fit this run's model or "
                                         r"optimizer \(.*size mismatch.*\): train.model, the "
                                         r"task's build_model or configure_optimizer changed"):
        checkpoint.restore(saved, bigger, torch.optim.SGD(bigger.parameters(), lr=0.1))
