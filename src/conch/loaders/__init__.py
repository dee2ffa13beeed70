"""Feeding engines and models: picklable pinned scans, Polars predicate pushdown, data loaders."""

from conch.loaders.source import ScanSpec, open_table, resolve_table

__all__ = ["ScanSpec", "open_table", "resolve_table"]
