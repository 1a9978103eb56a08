"""Built-in models and the ``'module:factory'`` hook for users' own ``torch.nn.Module``.

Every factory is called as ``factory(input_shape=(C, H, W) or (F,), num_classes=N)`` so models
take their shapes from the data instead of from the config.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from pipeline.config.callables import load_callable


def small_cnn(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Two conv blocks and a linear head: enough for digits-sized images on a CPU."""
    if len(input_shape) != 3:
        raise ValueError(f"train.model (cnn) needs image input (C, H, W), got shape {input_shape}; "
                         f"use train.model: mlp for feature columns")
    channels, height, width = input_shape
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * (height // 4) * (width // 4), 64), nn.ReLU(),
        nn.Linear(64, num_classes),
    )


def mlp(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A two-layer perceptron over the flattened input."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), 128), nn.ReLU(),
                         nn.Linear(128, num_classes))


def resnet18(*, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """torchvision's ResNet-18 (random weights) for RGB images: a step sized for a GPU."""
    if len(input_shape) != 3 or input_shape[0] != 3:
        raise ValueError(f"train.model (resnet18) needs RGB images (3, H, W), got shape "
                         f"{input_shape}; set data.channels: 3")
    try:
        from torchvision.models import resnet18 as torchvision_resnet18
    except ImportError as exc:
        raise ValueError("train.model (resnet18) needs torchvision: pip install torchvision, "
                         "or use train.model: cnn") from exc
    return torchvision_resnet18(num_classes=num_classes)


MODELS: dict[str, Callable[..., nn.Module]] = {"cnn": small_cnn, "mlp": mlp, "resnet18": resnet18}


def build_model(spec: str, *, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """A built-in name or ``'module:factory'``; the error lists the choices."""
    if ":" in spec:
        factory = load_callable(spec, "train.model")
    elif spec in MODELS:
        factory = MODELS[spec]
    else:
        raise ValueError(f"train.model ({spec!r}) is not a built-in model ({', '.join(MODELS)}) "
                         f"nor 'module:factory'")
    model = factory(input_shape=tuple(input_shape), num_classes=num_classes)
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"train.model ({spec!r}) returned {type(model).__name__}, not an nn.Module")
    return model
