import pytest

from pipeline.config import Config, ConfigError, describe, load_config, to_dict
from pipeline.data.config import ImageFolderSource, ParquetSource


def errors_of(data, overrides=()):
    with pytest.raises(ConfigError) as info:
        load_config(data, list(overrides))
    return info.value.errors


def test_defaults_build_a_frozen_config():
    config = load_config({})
    assert isinstance(config, Config)
    with pytest.raises(AttributeError):
        config.train.epochs = 3


def test_misspelt_key_names_path_and_suggests_field():
    with pytest.raises(ConfigError, match=r"^transfer\.gpu_prefetc: unknown field; did you mean "
                                          r"gpu_prefetch\?$"):
        load_config({"transfer": {"gpu_prefetc": 2}})


def test_unknown_section_is_an_error():
    with pytest.raises(ConfigError, match=r"^trian: unknown field; did you mean train\?"):
        load_config({"trian": {}})


def test_wrong_type_names_path_value_and_type():
    with pytest.raises(ConfigError, match=r"^train\.epochs: expected int, got 'three' \(str\)$"):
        load_config({"train": {"epochs": "three"}})


def test_negative_count_names_bound():
    with pytest.raises(ConfigError, match=r"^train\.num_workers \(-2\) must be >= 1$"):
        load_config({"train": {"num_workers": -2}})


def test_bound_with_remedy():
    with pytest.raises(ConfigError, match=r"transfer\.gpu_prefetch \(0\) must be >= 1; use 1 to "
                                          r"disable overlap"):
        load_config({"transfer": {"gpu_prefetch": 0}})


def test_all_errors_are_collected():
    errors = errors_of({"train": {"epochs": 0, "num_workers": "x"}, "data": {"channls": 3}})
    assert len(errors) == 3
    assert {e.split(":")[0].split(" ")[0] for e in errors} == {
        "train.epochs", "train.num_workers", "data.channls"}


def test_bool_is_not_an_int():
    assert errors_of({"train": {"epochs": True}}) == [
        "train.epochs: expected int, got True (bool)"]


def test_literal_choices_and_suggestion():
    assert errors_of({"collective": {"comm_hook": "bf61"}}) == [
        "collective.comm_hook: 'bf61' is not one of none, fp16, bf16, powersgd; did you mean bf16?"]


def test_tagged_source_kind_selects_fields():
    config = load_config({"data": {"source": {"kind": "image_folder", "path": "/data/pets"}}})
    assert config.data.source == ImageFolderSource(path="/data/pets")
    assert errors_of({"data": {"source": {"kind": "folder"}}}) == [
        "data.source.kind: 'folder' is not one of image_folder, digits, parquet, ray; "
        "did you mean image_folder?"]


def test_required_field_of_chosen_kind():
    assert errors_of({"data": {"source": {"kind": "parquet"}}}) == [
        "data.source.path: required field is missing (a parquet file or a directory of them)"]


def test_set_overrides_parse_yaml_values():
    config = load_config({}, ["train.epochs=3", "transfer.pin_memory=false", "train.lr=0.5",
                              "data.image_size=[64, 48]"])
    assert config.train.epochs == 3
    assert config.transfer.pin_memory is False
    assert config.train.lr == 0.5
    assert config.data.image_size == (64, 48)


def test_overriding_kind_starts_the_section_afresh():
    base = {"data": {"source": {"kind": "digits", "cache_dir": "/tmp/d"}}}
    config = load_config(base, ["data.source.kind=parquet", "data.source.path=/t.parquet"])
    assert config.data.source == ParquetSource(path="/t.parquet")


def test_malformed_override():
    assert errors_of({}, ["train.epochs"]) == [
        "--set 'train.epochs': expected KEY=VALUE, e.g. train.epochs=3"]


def test_override_that_is_not_yaml_names_the_set():
    [error] = errors_of({}, ["train.lr=0.1", "train.epochs=[1,"])
    assert error.startswith("--set 'train.epochs=[1,': the value '[1,' is not valid YAML (")
    assert "write a list as [1, 2]" in error


def test_cross_field_check_runs_after_types():
    errors = errors_of({"data": {"channels": 3, "mean": [0.1, 0.2], "concurrency": [3, 1]}})
    assert "data.mean ([0.1, 0.2]) needs 1 or 3 values, one per channel" in errors
    assert "data.concurrency ([3, 1]) must be [min, max] with min <= max" in errors


def test_round_trip_through_plain_data():
    config = load_config({"train": {"epochs": 2}, "data": {"image_size": [8, 8]}})
    assert load_config(to_dict(config)) == config


def test_yaml_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- a list\n")
    assert "the top level must be a mapping" in errors_of(bad)[0]
    assert "config file not found" in errors_of(tmp_path / "missing.yaml")[0]


def test_every_field_is_documented():
    rows = describe(Config)
    undocumented = [name for name, _, doc in rows if not doc]
    assert not undocumented
    assert ("train.epochs", "5", "passes over the training split") in rows


def test_single_mean_and_std_apply_to_every_channel():
    config = load_config({"data": {"channels": 3, "mean": [0.5], "std": [0.25]}})
    assert config.data.channel_stats() == ((0.5, 0.5, 0.5), (0.25, 0.25, 0.25))


def test_renamed_keys_still_work_with_a_warning(caplog):
    old = {"data": {"batch_size": 16, "prefetch_batches": 5, "stall_timeout_s": 7.0},
           "transfer": {"gpu_prefetch": 3}}
    with caplog.at_level("WARNING", logger="pipeline.config.root"):
        config = load_config(old, ["data.prefetch_batches=6"])
    assert config.data.decode_batch_size == 16
    assert config.transfer.host_prefetch == 6  # --set wins over the file, as for any key
    assert config.transfer.stall_timeout_s == 7.0 and config.transfer.gpu_prefetch == 3
    said = caplog.text
    for old_key, new_key in (("data.batch_size", "data.decode_batch_size"),
                             ("data.prefetch_batches", "transfer.host_prefetch"),
                             ("data.stall_timeout_s", "transfer.stall_timeout_s")):
        assert f"{old_key} is now {new_key}" in said
    assert old["data"] == {"batch_size": 16, "prefetch_batches": 5, "stall_timeout_s": 7.0}
    assert "batch_size" not in to_dict(config)["data"]  # a saved config uses the new names


def test_learning_rates_in_exponent_notation_are_floats(tmp_path):
    """Issue 30 item 8: YAML 1.1 reads 3e-4 (no dot) as a string; every lr is written so."""
    path = tmp_path / "cfg.yaml"
    path.write_text("train:\n  lr: 3e-4\n  weight_decay: 1e-2\n")
    cfg = load_config(path, ["train.grad_clip_norm=1E0"])
    assert (cfg.train.lr, cfg.train.weight_decay, cfg.train.grad_clip_norm) == (3e-4, 1e-2, 1.0)
    with pytest.raises(ConfigError, match=r"train.lr: expected float, got 'fast' \(str\)"):
        load_config(path, ["train.lr=fast"])


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_a_config_file_without_settings_is_said_to_mean_every_default(tmp_path, caplog, text):
    path = tmp_path / "job.yaml"
    path.write_text(text)
    with caplog.at_level("WARNING", logger="pipeline.config.root"):
        cfg = load_config(path)
    assert cfg == load_config({})
    assert f"{path} holds no settings (it is empty or only comments)" in caplog.text
