"""Lazy loading of optional dependencies, with an error that names the extra to install."""

from __future__ import annotations

import importlib
from types import ModuleType

from conch.errors import MissingDependencyError

_EXTRAS = {
    "pandas": "pandas",
    "polars": "polars",
    "duckdb": "duckdb",
    "pyspark": "spark",
    "psycopg": "postgres",
}


def optional_import(module: str) -> ModuleType:
    """Import `module`, or raise an error saying which `conch[extra]` provides it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        extra = _EXTRAS.get(module.split(".")[0], module)
        raise MissingDependencyError(
            f"{module} is needed for this; install it with: pip install 'conch[{extra}]'"
        ) from e
