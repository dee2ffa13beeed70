"""Shared fixtures: a fresh embedded warehouse per test; suite-wide settings.

Nothing may fail because the machine is loaded: hypothesis runs without deadlines everywhere
(the `conch` profile), and no test asserts wall-clock time. The suite runs under pytest-xdist;
every test that needs Spark is grouped onto one worker (`--dist loadgroup`), so a run starts one
JVM, not one per worker.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

import conch

# real services (S3 via moto, PostgreSQL, `conch serve`) for the backend suites
pytest_plugins = ["services"]

settings.register_profile("conch", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("conch")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("spark") is not None:
            item.add_marker(pytest.mark.xdist_group("spark"))


@pytest.fixture
def catalog(tmp_path: Path) -> Iterator[conch.Catalog]:
    """Closed at the end (no background settle of its tables outlives the test)."""
    with conch.connect(tmp_path / "warehouse") as cat:
        yield cat


@pytest.fixture
def small_files_catalog(tmp_path: Path) -> Iterator[conch.Catalog]:
    """Tiny chunks and fragments, so small tests exercise many runs and fragments."""
    opts = conch.WriteOptions(chunk_rows=7, fragment_bytes=64, large_value_bytes=1 << 30)
    with conch.connect(tmp_path / "warehouse", write_options=opts) as cat:
        yield cat
