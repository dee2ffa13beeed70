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
    "torch": "torch",
    "PIL": "torch",  # conch.engines.torch.decoders.image
    "psycopg_pool": "postgres",
    "obstore": "s3",
    "httpx": "http",
    "fastapi": "server",
    "uvicorn": "server",
    "starlette": "server",
    "datasets": "hf",
    "faiss": "search",
    "tantivy": "search",
    "moto": "dev",  # the local S3 server of `conch demo --s3`
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


class LazyModule:
    """A module imported on first attribute access.

    `vortex` imports pandas when it loads; importing it lazily keeps `import conch` free of
    pandas (and fast) until the first file is read or written.
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._module: ModuleType | None = None

    def __getattr__(self, attr: str) -> object:
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)
