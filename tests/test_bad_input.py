"""Bad input gets a clear, typed error and loses no committed data."""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pytest

import conch
from conch.errors import (
    ColumnNotFoundError,
    CorruptFileError,
    DuplicateKeyError,
    InvalidKeyError,
    KeyTypeError,
    LevelError,
    SchemaError,
    TableExistsError,
    TableNotFoundError,
    TimeTravelError,
)
from helpers import local_path


@pytest.fixture
def table(catalog: conch.Catalog) -> conch.Table:
    t = catalog.create_table("t", [("id", pa.uint64())], pa.schema([("score", pa.float64()), ("name", pa.string())]))
    t.write([{"id": 1, "score": 0.5, "name": "a"}, {"id": 2, "score": 0.7, "name": "b"}])
    return t


def unchanged(t: conch.Table) -> None:
    assert t.scan().to_pylist() == [{"id": 1, "score": 0.5, "name": "a"}, {"id": 2, "score": 0.7, "name": "b"}]
    assert len(t.history()) == 1


@pytest.mark.parametrize(
    ("rows", "error", "message"),
    [
        ([{"id": "x", "score": 1.0}], KeyTypeError, "key column 'id' must be uint64"),
        ([{"id": -1, "score": 1.0}], KeyTypeError, "cannot cast"),
        ([{"id": None, "score": 1.0}], InvalidKeyError, "null"),
        ([{"score": 1.0}], SchemaError, r"missing key column\(s\) \['id'\]"),
        ([{"id": 5, "score": 1.0}, {"id": 5, "score": 2.0}], DuplicateKeyError, "more than once"),
        ([{"id": 5, "score": "high"}], SchemaError, "score"),
        ([{"id": 5, "name": 3.5}], SchemaError, "name"),
    ],
)
def test_bad_writes_raise_typed_errors(table: conch.Table, rows: list[dict], error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        table.write(rows)
    unchanged(table)


def test_errors_are_conch_errors_and_builtins() -> None:
    assert issubclass(KeyTypeError, TypeError) and issubclass(KeyTypeError, conch.ConchError)
    assert issubclass(DuplicateKeyError, ValueError)
    assert issubclass(ColumnNotFoundError, LookupError)


def test_oversized_and_nan_keys(catalog: conch.Catalog) -> None:
    t = catalog.create_table("s", [("name", pa.string())])
    with pytest.raises(InvalidKeyError, match="at most 1024 bytes"):
        t.write([{"name": "x" * 1025, "v": 1}])
    f = catalog.create_table("f", [("x", pa.float64())])
    with pytest.raises(InvalidKeyError, match="NaN"):
        f.write([{"x": float("nan"), "v": 1}])
    assert t.history() == [] and f.history() == []


def test_duplicate_keys_across_streamed_chunks(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w", write_options=conch.WriteOptions(chunk_rows=2))
    t = cat.create_table("t", [("id", pa.int64())])
    batches = [pa.record_batch({"id": [1, 2], "v": [1, 1]}), pa.record_batch({"id": [3, 1], "v": [2, 2]})]
    with pytest.raises(DuplicateKeyError):
        t.write(pa.RecordBatchReader.from_batches(batches[0].schema, iter(batches)))
    assert t.history() == []


def test_unknown_columns_and_groups_in_scans(table: conch.Table) -> None:
    with pytest.raises(ColumnNotFoundError, match="no column or group 'nope'"):
        table.scan("nope")
    with pytest.raises(ColumnNotFoundError):
        table.scan(where=conch.Col("nope") > 1).to_arrow()
    with pytest.raises(ColumnNotFoundError):
        table["nope"]


def test_bad_key_arguments(table: conch.Table) -> None:
    with pytest.raises(KeyTypeError):
        table.scan(keys=["x"])
    with pytest.raises(InvalidKeyError):
        table.delete([None])
    unchanged(table)


def test_bad_time_travel(table: conch.Table) -> None:
    c = table.history()[0]
    with pytest.raises(TimeTravelError, match="empty"):
        table.scan(asof=c.time, since=c.time + 1)
    with pytest.raises(TimeTravelError):
        table.scan(asof="yesterday")  # type: ignore[arg-type]


def test_catalog_errors(catalog: conch.Catalog, table: conch.Table) -> None:
    with pytest.raises(TableExistsError):
        catalog.create_table("t", [("id", pa.uint64())])
    assert catalog.create_table("t", [("id", pa.uint64())], exist_ok=True).name == "t"
    with pytest.raises(TableNotFoundError):
        catalog.table("missing")
    with pytest.raises(KeyTypeError, match="keys must be"):
        catalog.create_table("bad", [("k", pa.list_(pa.int64()))])
    with pytest.raises(conch.ConchError, match="invalid table name"):
        catalog.create_table("../etc", [("k", pa.int64())])


def test_levels_cannot_be_mixed_in_one_scan(catalog: conch.Catalog) -> None:
    schema = pa.schema([("x", pa.int64()), ("items", pa.list_(pa.struct([("$", pa.int32()), ("v", pa.float64())])))])
    t = catalog.create_table("n", [("k", pa.int64())], schema)
    with pytest.raises(LevelError, match="one level"):
        t.scan("x", "items.v")
    with pytest.raises(SchemaError, match="keyed by int32"):
        t.write([{"k": 1, "items": [{"$": "not-an-int", "v": 1.0}]}])


def test_schema_change_of_level_and_column_kinds(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("k", pa.int64())])
    t.write([{"k": 1, "a": 1}])
    with pytest.raises(SchemaError, match="is a column"):
        t.write(pa.table({"k": [2], "a": pa.array([[{"$": 1}]], pa.list_(pa.struct([("$", pa.int64())])))}))
    assert t.scan().to_pylist() == [{"k": 1, "a": 1}]


def test_corrupt_fragment_is_a_typed_error_and_other_data_survives(table: conch.Table) -> None:
    frag = next(iter(table.state().fragments.values()))
    path = local_path(table.catalog.storage, frag.path)
    with open(path, "r+b") as f:
        f.seek(max(0, os.path.getsize(path) - 64))
        f.write(b"\x00" * 64)
    table.catalog.format.clear_cache()
    with pytest.raises(CorruptFileError, match=frag.id):
        table.scan().to_arrow()
    # the log is intact: new writes still commit
    table.write([{"id": 3, "score": 1.0}])
    assert len(table.history()) == 2


def test_unsupported_input(table: conch.Table) -> None:
    with pytest.raises(SchemaError, match="cannot write"):
        table.write(42)
    with pytest.raises(SchemaError, match="must hold dicts"):
        table.write([1, 2])
    unchanged(table)


def test_missing_file_is_a_typed_error_naming_it(table: conch.Table) -> None:
    frag = next(iter(table.state().fragments.values()))
    os.remove(local_path(table.catalog.storage, frag.path))
    table.catalog.format.clear_cache()
    with pytest.raises(CorruptFileError, match=frag.id):
        table.scan().to_arrow()


def test_expression_misuse_and_filter_syntax_errors(table: conch.Table) -> None:
    with pytest.raises(conch.ExpressionError, match=r"use & \| ~ instead"):
        table.scan(where=(table["score"] > 0.1) and (table["score"] < 0.9))
    with pytest.raises(conch.ExpressionError, match="where= takes a Conch expression"):
        table.scan(where="score > 1")
    from conch.expr import parse

    with pytest.raises(conch.FilterSyntaxError, match="cannot parse filter"):
        parse("score >")
    assert issubclass(conch.FilterSyntaxError, ValueError)
