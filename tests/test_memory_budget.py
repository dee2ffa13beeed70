"""`connect(memory_budget=)`: one option sizes every bounded cache and buffer; a small budget
changes how much is held, never what a scan returns; a bad budget is a typed error."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.errors import InvalidArgumentError


@pytest.mark.parametrize("bad", [0, 8 << 20, -5, 1.5e9, True, "1G"])
def test_bad_budget_is_refused_before_anything_is_opened(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        conch.connect(tmp_path / "w", memory_budget=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "w").exists()


def test_small_budget_scans_and_takes_the_same_rows(tmp_path: Path) -> None:
    ids = list(range(0, 4000, 2))
    opts = conch.WriteOptions(chunk_rows=300)
    big = conch.connect(tmp_path / "w", write_options=opts, maintenance=conch.Policy(auto=False))
    t = big.create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": ids, "a": [float(i) for i in ids]}))
    t.write({"id": list(range(1, 4001, 37)), "a": [-1.0] * len(range(1, 4001, 37))})
    small = conch.connect(tmp_path / "w", memory_budget=64 << 20).table("t")
    assert small.scan().options.cache_bytes < t.scan().options.cache_bytes
    for scan in (lambda x: x.scan(), lambda x: x.scan(keys=[5, 6, 3999, 4000]), lambda x: x.scan(where=x["a"] < 0)):
        assert scan(small).to_pylist() == scan(t).to_pylist()
