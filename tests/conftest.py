"""Markers by place, so that a part of the suite can be chosen without listing files:
``-m "not integration"`` runs the unit tests in about a minute and a half, ``-m bench`` the
benchmark harnesses' tests. The README's test command runs everything."""

from pathlib import Path

import pytest

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.path)).relative_to(HERE)
        if path.parts[0] == "integration":
            item.add_marker(pytest.mark.integration)
        if "bench" in path.parts or path.name.startswith(("test_bench", "test_benchmarks")):
            item.add_marker(pytest.mark.bench)
