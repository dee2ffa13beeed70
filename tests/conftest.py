"""Shared fixtures: a fresh embedded warehouse per test."""

from __future__ import annotations

from pathlib import Path

import pytest

import conch


@pytest.fixture
def catalog(tmp_path: Path) -> conch.Catalog:
    return conch.connect(tmp_path / "warehouse")


@pytest.fixture
def small_files_catalog(tmp_path: Path) -> conch.Catalog:
    """Tiny chunks and fragments, so small tests exercise many runs and fragments."""
    opts = conch.WriteOptions(chunk_rows=7, fragment_bytes=64, large_value_bytes=1 << 30)
    return conch.connect(tmp_path / "warehouse", write_options=opts)
