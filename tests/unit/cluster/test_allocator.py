"""``run.allocator``: the job's runtime env that preloads jemalloc, or a refusal that says how
to install it (whichever this machine calls for: the real loader's search, not a stub)."""

import ctypes.util

import pytest

from pipeline.cluster.session import allocator_env
from pipeline.config import ConfigError, load_config


def test_system_malloc_needs_no_runtime_env():
    assert allocator_env("system") == {}
    assert load_config({}).run.allocator == "system"


def test_jemalloc_is_preloaded_by_soname_or_refused_with_the_install_command():
    if ctypes.util.find_library("jemalloc"):
        assert allocator_env("jemalloc") == {"env_vars": {"LD_PRELOAD": "libjemalloc.so.2"}}
    else:
        with pytest.raises(ConfigError, match=r"run.allocator \('jemalloc'\).*apt-get install "
                                              r"libjemalloc2.*run.allocator=system"):
            allocator_env("jemalloc")


def test_an_unknown_allocator_names_the_choices():
    with pytest.raises(ConfigError, match="run.allocator"):
        load_config({"run": {"allocator": "tcmalloc"}})
