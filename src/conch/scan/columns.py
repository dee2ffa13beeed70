"""Column choices shared by the loaders and enrichment (imports nothing above the schema)."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from conch.errors import ConchError
from conch.model.schema import Column


def narrowest_column(columns: Sequence[Column]) -> str:
    """The path of the cheapest column to read when only keys are wanted (a scan reads some
    column): fixed width before variable width, then by path."""
    if not columns:
        raise ConchError("the level has no columns to scan")
    return min(columns, key=lambda c: (_width(c.type), c.path)).path


def _width(t: pa.DataType) -> int:
    try:
        return int(t.bit_width)
    except ValueError:
        return 1 << 20  # variable width: strings, blobs, lists
