"""Small helpers shared by tests."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa

import conch
from conch.storage import LocalStorage


def local_path(storage: LocalStorage, rel: str) -> str:
    """Where a stored file lives on disk, for tests that damage or inspect files directly."""
    return os.path.join(storage.uri, rel)


def engine_table(path: Path, struct_b: Callable[[int], object]) -> conch.Table:
    """The table the engine-pushdown tests (Polars, DuckDB) query: 300 keys with floats (NaN and
    null among them), strings with nulls, a struct `g` (`g.b` from `struct_b(i)`), then a second,
    overlapping run rewriting `x` for every third key from 250 on."""
    t = conch.connect(path).create_table("t", [("id", pa.int64())])
    xs = [math.nan if i % 17 == 0 else (None if i % 11 == 0 else (i - 100) / 10) for i in range(300)]
    t.write(
        {
            "id": list(range(300)),
            "x": pa.array(xs, pa.float64()),
            "s": [f"s{i % 7}" if i % 5 else None for i in range(300)],
            "g": [{"a": i % 4, "b": struct_b(i)} for i in range(300)],
        }
    )
    t.write({"id": list(range(250, 400, 3)), "x": pa.array([1.5] * 50, pa.float64())})
    return t
