"""``data.source.kind: ray`` refuses what cannot work with the field, the value and the remedy,
before any Ray Dataset runs (no Ray started)."""

import pytest

from pipeline.config import ConfigError, load_config
from pipeline.data import plan_source
from pipeline.data.sources.ray_dataset import user_datasets


def config(*sets):
    return load_config({}, ["data.source.kind=ray", *sets])


def test_a_function_that_cannot_be_imported_fails_before_ray_starts():
    with pytest.raises(ConfigError, match=r"data.source.function \('no_such_module:rows'\): "
                                          r"cannot import 'no_such_module'"):
        plan_source(config("data.source.function=no_such_module:rows").data)


def test_a_function_that_returns_something_else_is_named_with_what_it_gave():
    source = config("data.source.function=builtins:list").data.source
    with pytest.raises(ConfigError, match=r"data.source.function \('builtins:list'\) gave list: "
                                          r"expected a ray.data.Dataset or a dict"):
        user_datasets(source)


def test_datasets_and_a_function_are_one_source_too_many():
    source = config("data.source.function=builtins:list").data.source
    with pytest.raises(ConfigError, match="both name the data; keep one"):
        user_datasets(source, given={"train": object()})


def test_no_function_and_no_datasets_says_how_to_give_them():
    with pytest.raises(ConfigError, match=r"pipeline.run\(cfg, datasets=...\)"):
        user_datasets(config().data.source)


@pytest.mark.parametrize("sets, message", [
    (["data.augment.hflip=0.5"], "the ray source's rows are yours: remove data.augment"),
    (["data.source.args=[1, 2]"], r"data.source.args \(\[1, 2\]\) must be a mapping"),
])
def test_settings_that_do_not_apply_to_a_users_rows_are_refused(sets, message):
    with pytest.raises(ConfigError, match=message):
        config(*sets)
