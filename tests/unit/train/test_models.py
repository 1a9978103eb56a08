import pytest
import torch

from pipeline.train import build_model


@pytest.mark.parametrize("name,shape", [("cnn", (1, 32, 32)), ("cnn", (3, 64, 48)),
                                        ("mlp", (1, 8, 8)), ("mlp", (20,))])
def test_builtin_models_take_shapes_from_data(name, shape):
    model = build_model(name, input_shape=shape, num_classes=7)
    assert model(torch.zeros(4, *shape)).shape == (4, 7)


def test_user_factory():
    model = build_model("tests.unit.train.user_models:tiny", input_shape=(5,), num_classes=3)
    assert model(torch.zeros(2, 5)).shape == (2, 3)


def test_bad_model_names():
    with pytest.raises(ValueError, match=r"train.model \('resnet'\) is not a built-in model"):
        build_model("resnet", input_shape=(1, 8, 8), num_classes=2)
    with pytest.raises(ValueError, match=r"train.model \('nowhere:f'\): cannot import"):
        build_model("nowhere:f", input_shape=(1, 8, 8), num_classes=2)
    with pytest.raises(ValueError, match="cnn.*needs image input"):
        build_model("cnn", input_shape=(10,), num_classes=2)
