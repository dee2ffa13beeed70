"""A tuple in a nested seek is one composite key, a list several values of one key column, and
a key without a record is never silently ignored (issue 32, item 9)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

import conch


@pytest.fixture
def table(tmp_path: Path) -> conch.Table:
    t = conch.connect(tmp_path / "w").create_table("images", [("kind", pa.string())])
    t.write(
        [
            {"kind": "color", "photos": [{"$": "astronaut", "w": 512}, {"$": "coffee", "w": 400}]},
            {"kind": "gray", "photos": [{"$": "camera", "w": 256}]},
        ]
    )
    return t


def test_a_tuple_is_one_composite_key(table: conch.Table) -> None:
    one = table.photos["color", "astronaut"].to_py()  # before: two parent keys, "astronaut" ignored
    assert one == table.photos["color"]["astronaut"].to_py()
    assert one["w"] == 512
    assert [r["w"] for r in table.photos[["color", "gray"]].to_py()] == [512, 400, 256]  # a list: one column


def test_a_key_without_a_record_is_an_error_or_empty(table: conch.Table) -> None:
    with pytest.raises(conch.InvalidKeyError, match="no record"):
        table.photos["color", "nope"].to_py()
    assert table.photos["nope"].to_py() == []
    with pytest.raises(conch.InvalidKeyError, match="3 key values for the 2 key column"):
        table.photos["color", "astronaut", "x"]
