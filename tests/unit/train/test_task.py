"""The task protocol without Ray: resolution and its errors, the built-in classification task,
the default optimizer and schedule, and checkpoints holding the schedule."""

import math
import pickle

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import pipeline
from pipeline.config import ConfigError, load_config
from pipeline.train import checkpoint
from pipeline.train.config import BUILTIN_TASKS
from pipeline.train.context import TaskContext
from pipeline.train.task import (
    TASKS,
    ClassificationTask,
    Task,
    cosine,
    default_optimizer,
    default_scheduler,
    resolve_task,
    task_name,
)
from tests.unit.train.tasks import DuckTask, WeightedSumTask


def config(**train):
    return load_config({"train": train})


def test_the_config_knows_every_builtin_task():
    assert BUILTIN_TASKS == tuple(TASKS)
    assert pipeline.Task is Task and pipeline.ClassificationTask is ClassificationTask


def test_train_task_resolves_names_and_classes():
    assert type(resolve_task("classification")) is ClassificationTask
    task = resolve_task("tests.unit.train.tasks:WeightedSumTask")
    assert isinstance(task, WeightedSumTask)
    assert task_name(task) == "tests.unit.train.tasks.WeightedSumTask"
    assert task_name(resolve_task("classification")) == "classification"
    given = WeightedSumTask()
    assert resolve_task(given) is given  # a task given in Python is used as it is


def test_a_subclass_of_the_builtin_task_is_named_by_its_class():
    class Smoothed(ClassificationTask):
        pass

    assert task_name(Smoothed()).endswith("test_task.test_a_subclass_of_the_builtin_task_is_"
                                          "named_by_its_class.<locals>.Smoothed")


@pytest.mark.parametrize("value,error,message", [
    ("regression", ValueError,
     r"train.task \('regression'\) is not a built-in task \(classification\) nor "
     r"'package.module:ClassName'"),
    ("nowhere.tasks:Mine", ValueError,
     r"train.task \('nowhere.tasks:Mine'\): cannot import 'nowhere.tasks'.*importable on every"),
    ("tests.unit.train.tasks:Missing", ValueError,
     r"train.task \('tests.unit.train.tasks:Missing'\): .* has no callable 'Missing'"),
    ("tests.unit.train.tasks:NoLoss", TypeError,
     r"train.task \('tests.unit.train.tasks:NoLoss': a NoLoss\) has no loss; subclass "
     r"pipeline.Task"),
    ("tests.unit.train.tasks:needs_arguments", TypeError,
     r"train.task \('tests.unit.train.tasks:needs_arguments'\) must be callable without "
     r"arguments"),
])
def test_a_bad_train_task_names_the_field_the_value_and_the_remedy(value, error, message):
    with pytest.raises(error, match=message):
        resolve_task(value)


def test_the_config_refuses_a_task_that_is_neither_a_name_nor_module_colon_class():
    with pytest.raises(ConfigError, match=r"train.task \('regresion'\) is not a built-in task "
                                          r"\(classification\) nor 'package.module:ClassName'"):
        config(task="regresion")
    assert config(task="my.tasks:Mine").train.task == "my.tasks:Mine"  # imported at run time


def test_the_new_train_fields_are_checked():
    with pytest.raises(ConfigError) as info:
        config(optimizer="adam", lr_schedule="linear", precision="fp16", grad_accum_steps=0,
               grad_clip_norm=-1, weight_decay=-0.1)
    text = str(info.value)
    assert "train.optimizer: 'adam' is not one of sgd, adamw; did you mean adamw?" in text
    assert "train.lr_schedule: 'linear' is not one of constant, cosine" in text
    assert "train.precision: 'fp16' is not one of fp32, bf16" in text
    assert "train.grad_accum_steps (0) must be >= 1" in text
    assert "train.grad_clip_norm (-1.0) must be >= 0" in text
    assert "train.weight_decay (-0.1) must be >= 0" in text


def test_a_task_subclass_must_define_the_model_and_the_loss():
    class ModelOnly(Task):
        def build_model(self, ctx):
            return torch.nn.Linear(ctx.input_shape[0], ctx.num_classes)

    with pytest.raises(TypeError, match=r"task \(.*ModelOnly\) has no loss; subclass"):
        resolve_task(ModelOnly())
    with pytest.raises(TypeError, match=r"has no build_model nor loss"):
        resolve_task(Task())


def test_a_class_instead_of_an_instance_is_refused():
    with pytest.raises(TypeError, match=r"task \(WeightedSumTask\) is a class; pass an instance: "
                                        r"task=WeightedSumTask\(\)"):
        resolve_task(WeightedSumTask)


def test_a_duck_typed_task_gets_the_defaults_and_pickles():
    task = resolve_task(DuckTask())
    assert isinstance(task, Task)
    assert task_name(task) == "tests.unit.train.tasks.DuckTask"
    cfg = config(optimizer="adamw", weight_decay=0.05)
    ctx = TaskContext(input_shape=(4,), num_classes=2, train=cfg.train)
    model = task.build_model(ctx)
    optimizer = task.configure_optimizer(model, ctx)
    assert isinstance(optimizer, torch.optim.AdamW)
    assert optimizer.param_groups[0]["weight_decay"] == 0.05
    batch = {"features": torch.ones(3, 4), "id": torch.arange(3)}
    assert task.batch_size(batch) == 3
    assert task.eval_counts(model, batch) == {} and task.eval_metrics({}) == {}
    assert resolve_task(task) is task
    again = pickle.loads(pickle.dumps(task))  # travels to the workers in the WorkerSpec
    assert torch.isfinite(again.loss(model, batch))
    assert task_name(again) == "tests.unit.train.tasks.DuckTask"


def test_classification_reproduces_cross_entropy_and_argmax_accuracy():
    cfg = config(model="mlp")
    task = ClassificationTask()
    torch.manual_seed(0)
    model = task.build_model(input_shape=(6,), num_classes=4, config=cfg)
    x, y = torch.randn(10, 6), torch.randint(0, 4, (10,))
    batch = {"features": x, "label": y, "id": torch.arange(10)}
    assert torch.equal(task.loss(model, batch), torch.nn.CrossEntropyLoss()(model(x), y))
    counts = task.eval_counts(model, batch)
    correct = int((model(x).argmax(dim=1) == y).sum())
    assert (int(counts["correct"]), int(counts["total"])) == (correct, 10)
    assert task.eval_metrics({"correct": 7.0, "total": 10.0}) == {"val_accuracy": 0.7,
                                                                  "val_samples": 10}
    assert task.eval_metrics({}) == {}  # no validation split


def test_classification_builds_train_model_channels_last_for_images():
    task = ClassificationTask()
    model = task.build_model(input_shape=(1, 8, 8), num_classes=3, config=config(model="cnn"))
    conv = model[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last)
    x = torch.randn(2, 1, 8, 8)
    batch = {"image": x, "label": torch.tensor([0, 2]), "id": torch.arange(2)}
    assert torch.allclose(task.loss(model, batch), F.cross_entropy(model(x), batch["label"]))
    with pytest.raises(ValueError, match="train.model .*needs image input"):
        task.build_model(input_shape=(5,), num_classes=3, config=config(model="cnn"))


def test_the_default_optimizer_follows_the_config():
    model = torch.nn.Linear(3, 2)
    sgd = default_optimizer(model, config(lr=0.2).train)
    assert type(sgd) is torch.optim.SGD
    assert (sgd.defaults["lr"], sgd.defaults["momentum"], sgd.defaults["weight_decay"]) == \
        (0.2, 0.9, 0.0)
    adamw = default_optimizer(model, config(optimizer="adamw", lr=1e-3, weight_decay=0.1).train)
    assert type(adamw) is torch.optim.AdamW and adamw.defaults["weight_decay"] == 0.1


def test_cosine_runs_from_lr_to_zero_over_every_step_and_stays_there():
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=0.4)
    assert default_scheduler(optimizer, config().train, total_steps=10) is None  # constant
    scheduler = default_scheduler(optimizer, config(lr_schedule="cosine").train, total_steps=4)
    lrs = []
    for _ in range(6):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs == pytest.approx([0.4, 0.4 * cosine(1, total=4), 0.2, 0.4 * cosine(3, total=4),
                                 0.0, 0.0], abs=1e-12)
    assert cosine(1, total=4) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))


def trained(schedule: str = "cosine"):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = default_optimizer(model, config(optimizer="adamw").train)
    scheduler = default_scheduler(optimizer, config(lr_schedule=schedule).train, total_steps=8)
    for _ in range(3):
        model(torch.randn(4, 3)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
    return model, optimizer, scheduler


def test_a_checkpoint_holds_the_schedule_and_resumes_it(tmp_path):
    model, optimizer, scheduler = trained()
    ids = np.array([3, 1, 2])
    torch.save(checkpoint.state(model, optimizer, scheduler, epoch=1, step=3, consumed=ids),
               tmp_path / "model.pt")
    saved = torch.load(tmp_path / "model.pt", weights_only=True)  # as the loader reads it
    fresh, fresh_opt, fresh_sched = trained()
    torch.nn.init.zeros_(fresh.weight)
    fresh_sched.last_epoch = 0
    resume = checkpoint.restore(saved, fresh, fresh_opt, fresh_sched)
    assert (resume.epoch, resume.step, resume.consumed.tolist()) == (1, 3, [3, 1, 2])
    assert torch.equal(fresh.weight, model.weight)
    assert fresh_sched.last_epoch == scheduler.last_epoch == 3
    assert fresh_sched.get_last_lr() == scheduler.get_last_lr()
    assert fresh_opt.state_dict()["state"][0]["step"] == 3  # AdamW's moments came back too


def test_a_checkpoint_from_before_schedules_still_loads(tmp_path, caplog):
    model, optimizer, _ = trained("constant")
    old = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 2,
           "step": 0, "consumed": torch.empty(0, dtype=torch.int64)}  # no "scheduler" entry
    _, fresh_opt, fresh_sched = trained()
    fresh = torch.nn.Linear(3, 2)
    resume = checkpoint.restore(old, fresh, fresh_opt, fresh_sched)
    assert resume.epoch == 2 and torch.equal(fresh.weight, model.weight)
    assert "no learning-rate schedule" in caplog.text
    assert checkpoint.restore(old, fresh, fresh_opt).epoch == 2  # constant rate: no schedule


def test_a_task_gets_a_small_context_and_the_old_signatures_still_work_this_release():
    from pipeline.train import context as task_calls
    from tests.unit.train.tasks import LegacyTask, WeightedSumTask

    cfg = config(model="mlp", lr=0.25)
    ctx = TaskContext(input_shape=(6,), num_classes=4, train=cfg.train, total_steps=40)
    new = WeightedSumTask()
    assert task_calls.legacy_methods(new, "WeightedSumTask") == []
    model = task_calls.build_model(new, ctx, cfg)
    assert task_calls.configure_optimizer(new, model, ctx, cfg).param_groups[0]["lr"] == 0.25
    old = LegacyTask()
    assert [line.split(" is ")[0] for line in task_calls.legacy_methods(old, "LegacyTask")] == [
        "LegacyTask.build_model(self, *, input_shape, num_classes, config)",
        "LegacyTask.configure_optimizer(self, model, config)",
        "LegacyTask.configure_scheduler(self, optimizer, config, total_steps)"]
    model = task_calls.build_model(old, ctx, cfg)
    assert model(torch.randn(2, 6)).shape == (2, 4)
    task_calls.configure_optimizer(old, model, ctx, cfg)
    task_calls.configure_scheduler(old, None, ctx, cfg)
    assert old.seen == {"build_model": cfg, "configure_optimizer": cfg,
                        "configure_scheduler": (cfg, 40)}  # the whole config, as before
