"""A diverging loss is caught: counted on the device every step, raised past the limit with the
count, the learning rate and the remedy, and said to the driver first."""

import pytest
import torch

from pipeline.train.step import NonFiniteLossError, Stepper
from pipeline.train.task import ClassificationTask


def stepper(limit: int, said: list) -> Stepper:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    return Stepper(task=ClassificationTask(), model=model, ddp=model,
                   optimizer=torch.optim.SGD(model.parameters(), lr=0.5),
                   max_nonfinite=limit, on_diverged=said.append)


def loss(s: Stepper, scale: float) -> torch.Tensor:
    x, y = torch.randn(8, 4), torch.randint(0, 3, (8,))
    return torch.nn.functional.cross_entropy(s.ddp(x), y) * scale


@pytest.mark.parametrize("limit", [0, 2])
def test_the_run_stops_once_more_losses_than_allowed_were_not_finite(limit):
    said = []
    s = stepper(limit, said)
    for _ in range(3):  # finite steps: nothing to say
        s.backward(loss(s, 1.0))
        s.step()
    s.check_finite(epoch=0)
    for bad in range(limit + 1):
        s.check_finite(epoch=1)  # up to the limit: allowed
        s.backward(loss(s, float("nan") if bad % 2 == 0 else float("inf")))
        s.step()
    with pytest.raises(NonFiniteLossError, match=rf"NaN or infinite in {limit + 1} step\(s\) by "
                                                 rf"epoch 2 \(train.max_nonfinite_steps is "
                                                 rf"{limit}\).*Lower train.lr \(now 0.5\)"):
        s.check_finite(epoch=1)
    assert len(said) == 1 and said[0].startswith("the training loss was NaN or infinite")
