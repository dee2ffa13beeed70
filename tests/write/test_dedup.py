"""The streamed write's duplicate check (conch/write/dedup.py): a write raises `DuplicateKeyError`
naming a repeated key exactly when its rows repeat a key, however the input is cut into chunks
(sorted chunks with disjoint spans, overlapping unsorted chunks, one or several key columns), and
a write that raises commits nothing."""

from __future__ import annotations

import re
from pathlib import Path
from tempfile import TemporaryDirectory

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.errors import DuplicateKeyError

ROWS = st.lists(st.tuples(st.integers(-20, 20), st.integers(0, 2)), min_size=1, max_size=60)


@settings(max_examples=40, deadline=None)
@given(rows=ROWS, chunk_rows=st.integers(1, 9), two_columns=st.booleans(), sort=st.booleans())
def test_duplicate_iff_a_key_repeats(
    rows: list[tuple[int, int]], chunk_rows: int, two_columns: bool, sort: bool
) -> None:
    if sort:
        rows = sorted(rows)
    keys = rows if two_columns else [(a, 0) for a, _ in rows]
    data = {"a": [a for a, _ in keys], "v": list(range(len(keys)))}
    key_cols = [("a", pa.int64())]
    if two_columns:
        data["b"] = [b for _, b in keys]
        key_cols.append(("b", pa.int32()))
    batch = pa.table(data)
    with TemporaryDirectory() as d:
        cat = conch.connect(Path(d) / "w", write_options=conch.WriteOptions(chunk_rows=chunk_rows))
        t = cat.create_table("t", key_cols)
        reader = pa.RecordBatchReader.from_batches(batch.schema, iter(batch.to_batches(max_chunksize=chunk_rows)))
        repeated = {k for k in keys if keys.count(k) > 1}
        if repeated:
            with pytest.raises(DuplicateKeyError) as e:
                t.write(reader)
            named = {int(m) for m in re.findall(r"'a': (-?\d+)", str(e.value))}
            assert named & {a for a, _ in repeated}
            assert t.history() == []
            return
        t.write(reader)
        got = t.scan().to_pylist()
        names = ["a", "b"] if two_columns else ["a"]
        assert [tuple(r[n] for n in names) for r in got] == sorted({k[: len(names)] for k in keys})
        assert sorted(r["v"] for r in got) == list(range(len(keys)))


def test_duplicate_float_and_timestamp_keys_across_chunks(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w", write_options=conch.WriteOptions(chunk_rows=2))
    for name, typ, vals in (
        ("f", pa.float64(), [3.5, -1.0, 2.0, -1.0]),
        ("ts", pa.timestamp("us"), [5, 1, 3, 1]),
        ("s", pa.string(), ["b", "a", "c", "a"]),
    ):
        t = cat.create_table(name, [("k", typ)])
        batch = pa.table({"k": pa.array(vals).cast(typ) if typ != pa.string() else vals, "v": [1, 2, 3, 4]})
        with pytest.raises(DuplicateKeyError, match="more than once"):
            t.write(pa.RecordBatchReader.from_batches(batch.schema, iter(batch.to_batches(max_chunksize=2))))
        assert t.history() == []
