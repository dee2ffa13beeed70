"""Small helpers shared by tests."""

from __future__ import annotations

import os

from conch.storage import LocalStorage


def local_path(storage: LocalStorage, rel: str) -> str:
    """Where a stored file lives on disk, for tests that damage or inspect files directly."""
    return os.path.join(storage.uri, rel)
