from torch import nn


def tiny(*, input_shape, num_classes):
    return nn.Linear(input_shape[0], num_classes)
