"""The whole job's config: one section per component, parsed from YAML only here."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from pipeline.collective.config import CollectiveConfig
from pipeline.config.loader import ConfigError, apply_overrides, parse
from pipeline.config.options import option
from pipeline.data.config import DataConfig
from pipeline.profile.config import ProfileConfig
from pipeline.train.config import TrainConfig
from pipeline.transfer.config import TransferConfig

logger = logging.getLogger(__name__)

#: old key → new key. The old names keep working for one release (until 0.2), with a warning.
RENAMED = {
    "data.batch_size": "data.decode_batch_size",  # the decode batch, not the training batch
    "data.prefetch_batches": "transfer.host_prefetch",  # consumed in the Train worker
    "data.stall_timeout_s": "transfer.stall_timeout_s",  # the feeder's timeout
}


@dataclass(frozen=True, kw_only=True)
class RunSection:
    """Where the job runs and where its results go (what the user chose, not what Ray decided)."""

    name: str = option("run", "a label for the run, shown in the summary")
    address: str = option("", "Ray address to join; empty uses RAY_ADDRESS, an already "
                              "initialised Ray, or starts a local one")
    output: str = option("", "run directory; empty means runs/<name>-<timestamp>")
    num_cpus: int = option(0, "logical CPUs of a locally started Ray; 0 means this machine's "
                              "core count", ge=0)
    dashboard: bool = option(False, "start a locally started Ray's dashboard (on 127.0.0.1); "
                                    "off saves its start-up on every run")
    connect_timeout_s: float = option(30.0, "seconds to wait for the cluster at `address` to "
                                            "accept a connection before the run fails", gt=0)
    allocator: Literal["system", "jemalloc"] = option(
        "system", "malloc of the Train workers and Ray Data actors: `jemalloc` preloads "
                  "libjemalloc.so.2 (Debian: apt-get install libjemalloc2) through the job's "
                  "runtime env; on a joined cluster every node needs it")


def _section(cls: type) -> Any:
    return field(default_factory=cls, metadata={"doc": cls.__doc__ or ""})


@dataclass(frozen=True, kw_only=True)
class Config:
    """A Feedline job."""

    run: RunSection = _section(RunSection)
    data: DataConfig = _section(DataConfig)
    transfer: TransferConfig = _section(TransferConfig)
    train: TrainConfig = _section(TrainConfig)
    collective: CollectiveConfig = _section(CollectiveConfig)
    profile: ProfileConfig = _section(ProfileConfig)


def read_yaml(path: str | Path) -> dict[str, Any]:
    """Read a config file into plain data; a missing file or non-mapping is a ConfigError."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError([f"{path}: config file not found"])
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise ConfigError([f"{path}: not valid YAML: {exc}"]) from exc
    if data is None:
        logger.warning("%s holds no settings (it is empty or only comments): every setting is "
                       "its default", path)
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"{path}: the top level must be a mapping of sections, "
                           f"got {type(data).__name__}"])
    return data


def load_config(source: str | Path | dict[str, Any] | Config,
                overrides: list[str] | None = None) -> Config:
    """A :class:`Config` from a YAML path, plain data or a Config, plus KEY=VALUE overrides."""
    if isinstance(source, Config):
        if not overrides:
            return source
        source = to_dict(source)
    data = read_yaml(source) if isinstance(source, (str, Path)) else source
    return parse(Config, apply_overrides(_renamed(data), [_renamed_set(o)
                                                          for o in overrides or []]))


def _renamed(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with every old key of :data:`RENAMED` moved to its new place (warned)."""
    found = [(old.split("."), new.split(".")) for old, new in RENAMED.items()
             if isinstance(data.get(old.split(".")[0]), dict)
             and old.split(".")[1] in data[old.split(".")[0]]]
    if not found:
        return data
    data = {k: dict(v) if isinstance(v, dict) else v for k, v in data.items()}
    for (section, name), (new_section, new_name) in found:
        value = data[section].pop(name)
        if not isinstance(data.get(new_section), dict):
            data[new_section] = {}
        data[new_section].setdefault(new_name, value)
        _warn(f"{section}.{name}", f"{new_section}.{new_name}")
    return data


def _renamed_set(item: str) -> str:
    key, sep, value = item.partition("=")
    new = RENAMED.get(key.strip())
    if new is None:
        return item
    _warn(key.strip(), new)
    return f"{new}{sep}{value}"


def _warn(old: str, new: str) -> None:
    logger.warning("%s is now %s; the old name still works in this release, not in the next",
                   old, new)


def to_dict(config: Any) -> Any:
    """Plain data (lists for tuples) that :func:`load_config` turns back into the same Config."""
    if hasattr(config, "__dataclass_fields__"):
        return {name: to_dict(getattr(config, name)) for name in config.__dataclass_fields__}
    if isinstance(config, tuple):
        return [to_dict(v) for v in config]
    return config
