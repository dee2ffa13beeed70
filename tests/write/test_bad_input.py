"""Bad input gets a clear, typed error and loses no committed data."""

from __future__ import annotations

import os
import time
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
from conch.log.wal import CLOCK_SLACK_US
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
    path = local_path(table.log.storage, frag.path)
    with open(path, "r+b") as f:
        f.seek(max(0, os.path.getsize(path) - 64))
        f.write(b"\x00" * 64)
    table.log.format.clear_cache()
    with pytest.raises(CorruptFileError, match=frag.id):
        table.scan().to_arrow()
    # the log is intact: new writes still commit (the automatic compaction after it cannot read the
    # damaged file: a warning naming it, not an error for a write that committed)
    with pytest.warns(RuntimeWarning, match=frag.id):
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
    os.remove(local_path(table.log.storage, frag.path))
    table.log.format.clear_cache()
    with pytest.raises(CorruptFileError, match=frag.id):
        table.scan().to_arrow()


def test_expression_misuse_and_filter_syntax_errors(table: conch.Table) -> None:
    with pytest.raises(conch.ExpressionError, match=r"use & \| ~ instead"):
        table.scan(where=(table["score"] > 0.1) and (table["score"] < 0.9))
    with pytest.raises(conch.ExpressionError, match="where= takes a Conch expression"):
        table.scan(where="score > 1")
    from conch.expr.syntax import parse

    with pytest.raises(conch.FilterSyntaxError, match="cannot parse filter"):
        parse("score >")
    assert issubclass(conch.FilterSyntaxError, ValueError)


# ----- issue 8 items 2, 7, 9: every refusal is typed, names the culprit, changes nothing ----------
class Snapshot:
    """What a refused write must leave alone: fresh records, history and (after vacuum) files."""

    def __init__(self, t: conch.Table) -> None:
        self.t = t
        self.rows = t.scan().to_pylist()
        self.history = len(t.history())
        self.files = self._files()

    def _files(self) -> set[str]:
        return {f.path for f in self.t.log.storage.list(self.t.id) if "/keys/" in f.path or "/cg/" in f.path}

    def check(self) -> None:
        assert self.t.scan().to_pylist() == self.rows
        assert len(self.t.history()) == self.history
        time.sleep(CLOCK_SLACK_US / 1e6 + 0.05)  # vacuum keeps files younger than the clock slack
        self.t.vacuum(older_than_seconds=0)  # leftovers of the refused write are vacuum's to remove
        assert self._files() == self.files


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        ({"id": 1, "a": 1}, {"id": 2, "a": {"x": 1}}, "'a' is a column of the table; it cannot also be a column group"),
        ({"id": 1, "g": {"x": 1}}, {"id": 2, "g": 5}, "'g' is a column group .* cannot also be a column"),
        ({"id": 1, "g": {"x": {"y": 1}}}, {"id": 2, "g": {"x": 2}}, "'g.x' is a column group"),
        ({"id": 1, "it": [{"$": 1, "v": 1.0}]}, {"id": 2, "it": {"v": 1.0}}, "'it' is a child level"),
        ({"id": 1, "it": {"v": 1.0}}, {"id": 2, "it": [{"$": 1, "v": 1.0}]}, "'it' is a column group"),
        ({"id": 1, "it": [{"$": 1, "v": 1.0}]}, {"id": 2, "it": 3}, "'it' is a child level"),
    ],
)
def test_a_path_is_a_column_a_group_or_a_level_never_two(
    catalog: conch.Catalog, first: dict, second: dict, message: str
) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([first])
    before = Snapshot(t)
    with pytest.raises(SchemaError, match=message):
        t.write([second])
    before.check()
    assert str(t.schema)  # renders; scans above succeeded


def test_group_named_like_a_level_is_refused(catalog: conch.Catalog) -> None:
    # root group "it" would give column "it.v" the full path of level it's column "v"
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "it": [{"$": 1, "v": 1.0}]}])
    before = Snapshot(t)
    with pytest.raises(SchemaError, match="'it' is a child level"):
        t.write([{"id": 2, "it": {"v": 2.0}}])
    before.check()
    assert t.scan(level="it").to_pylist() == [{"id": 1, "it": 1, "v": 1.0}]


def test_a_clashing_schema_from_before_the_check_is_a_typed_error_not_a_type_error() -> None:
    from conch.model.schema import Column, Schema

    # What an older Conch committed: column "a" and column "a.x" (group "a") at the root level.
    base = Schema.empty(pa.schema([pa.field("id", pa.int64(), nullable=False)]))
    broken = Schema(base.key_schema, base.levels, (Column(1, "", "a", pa.int64()), Column(2, "", "a.x", pa.int64())), 3)
    with pytest.raises(SchemaError, match="'a' is both a column and a column group"):
        broken.value_type("")
    assert "a [column]: i64" in broken.render() and "x: i64" in broken.render()
    assert [c.path for c in broken.resolve("a")[1]] == ["a"]  # still readable one at a time
    assert [c.path for c in broken.resolve("a.x")[1]] == ["a.x"]


def test_empty_and_null_child_lists_write_no_children(catalog: conch.Catalog) -> None:
    from nested_fixtures import make_recordings

    t = make_recordings(catalog)
    clips_before = t.scenes.clips.select(camera=conch._.camera).scan().to_pylist()
    t.scenes["s3"] = {"location": "park", "clips": []}
    t.scenes["s4"] = {"location": "lake", "clips": [{"$": "c9", "camera": "side", "frames": [], "detections": None}]}
    t.scenes["s5"] = {"location": "hill", "clips": None}
    locs = t.scenes.select(loc=conch._.location).scan().to_arrow(keys=False)["loc"].to_pylist()
    assert locs == ["downtown", "highway", "park", "lake", "hill"]
    clips = t.scenes.clips.select(camera=conch._.camera).scan().to_pylist()
    assert clips == [*clips_before, {"scenes": "s4", "scenes.clips": "c9", "camera": "side"}]
    assert t.scenes["s4"].clips["c9"].frames.select(rgb=conch._.rgb).scan().to_pylist() == []
    assert "frames {$: u64}" in str(t.schema) and "list<null>" not in str(t.schema)


def test_empty_child_lists_through_write(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("id", pa.int64())])
    # Only empty/null lists: nothing says what `items` is, so nothing is added to the schema.
    t.write([{"id": 1, "items": []}, {"id": 2, "items": None}])
    assert t.schema.columns == []
    item = pa.struct([("$", pa.int64()), ("v", pa.float64())])
    t.write(pa.table({"id": [3, 4], "items": pa.array([[{"$": 1, "v": 1.0}], []], pa.list_(item))}))
    t.write([{"id": 5, "items": []}, {"id": 6, "items": None}, {"id": 7, "items": [{"$": 2, "v": 2.0}]}])
    t.write(pa.table({"id": [8], "items": pa.array([[]], pa.list_(item))}))
    assert [r["id"] for r in t.scan().to_pylist()] == [1, 2, 3, 4, 5, 6, 7, 8]
    assert t.scan(level="items").to_pylist() == [{"id": 3, "items": 1, "v": 1.0}, {"id": 7, "items": 2, "v": 2.0}]


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        ({"id": [3, 4], "score": [1.0]}, SchemaError, r"different lengths \{'id': 2, 'score': 1\}"),
        ([{"id": 3, "score": 1.0}, {"id": 4, "score": "high"}], SchemaError, r"column 'score' holds values of types"),
        ({"id": 3, "score": [1.0, 2.0]}, SchemaError, r"\['id'\] hold single values.*\[\{\.\.\.\}\]"),
        (pa.table([pa.array([3]), pa.array([4])], names=["id", "id"]), SchemaError, r"\['id'\] appear more than once"),
        ([{"id": 3, "score": "x"}], SchemaError, "column 'score' has type double"),
        ([{"id": 3, "d": pa.scalar(5, pa.duration("s"))}], SchemaError, "column 'd' has type duration"),
    ],
)
def test_bad_input_is_typed_and_named(table: conch.Table, data: object, error: type, message: str) -> None:
    before = Snapshot(table)
    with pytest.raises(error, match=message):
        table.write(data)
    before.check()


def test_pandas_index_key_gets_a_reset_index_hint(table: conch.Table) -> None:
    import pandas as pd

    before = Snapshot(table)
    frame = pd.DataFrame({"score": [1.0]}, index=pd.Index([3], name="id"))
    with pytest.raises(SchemaError, match=r"missing key column\(s\) \['id'\].*reset_index\(\)"):
        table.write(frame)
    before.check()
    table.write(frame.reset_index())
    assert table.scan(keys=[3]).to_pylist() == [{"id": 3, "score": 1.0, "name": None}]


def test_a_dict_of_single_values_is_one_record_and_empty_input_commits_no_rows(table: conch.Table) -> None:
    table.write({"id": 9, "score": 1.5})
    assert table.scan(keys=[9]).to_pylist() == [{"id": 9, "score": 1.5, "name": None}]
    rows = table.scan().to_pylist()
    c = table.write([])
    assert c.summary == "no rows" and table.scan().to_pylist() == rows
    assert table.write(pa.table({"id": pa.array([], pa.uint64())})).summary == "no rows"  # the same as Arrow


def test_numpy_dtypes_and_aliases_are_key_types(catalog: conch.Catalog) -> None:
    import numpy as np

    assert catalog.create_table("a", [("id", np.uint64)]).key_schema.field("id").type == pa.uint64()
    assert catalog.create_table("b", {"id": "int32"}).key_schema.field("id").type == pa.int32()
    with pytest.raises(KeyTypeError, match="'id': 'nope' is not a type"):
        catalog.create_table("c", [("id", "nope")])


def test_type_change_through_the_nested_api(catalog: conch.Catalog) -> None:
    from nested_fixtures import make_recordings

    t = make_recordings(catalog)
    before = Snapshot(t)
    with pytest.raises(SchemaError, match=r"'scenes\.location' has type string; cannot write 5"):
        t.scenes["s1"] = {"location": 5}
    with pytest.raises(SchemaError, match=r"'scenes\.location' has type string; cannot write \{'x': 1\}"):
        t.scenes["s1"] = {"location": {"x": 1}}
    with pytest.raises(SchemaError, match=r"'scenes\.clips\.duration' has type double; cannot write 'long'"):
        t.scenes["s1"].clips["c1"].duration = "long"
    before.check()


def test_negative_limit_is_an_error(table: conch.Table) -> None:
    for bad in (-1, 2.5, True):
        with pytest.raises(conch.InvalidArgumentError, match="limit must be a non-negative"):
            table.scan(limit=bad)  # type: ignore[arg-type]
    assert issubclass(conch.InvalidArgumentError, ValueError)
    assert table.scan(limit=0).to_pylist() == [] and len(table.scan(limit=1).to_pylist()) == 1


def test_comparisons_type_check_the_literal(table: conch.Table) -> None:
    with pytest.raises(conch.ExpressionError, match=r"column 'score' \(double\) with 'abc' \(str\).*use a number"):
        _ = table["score"] > "abc"
    with pytest.raises(conch.ExpressionError, match=r"column 'name' \(string\) with 1 \(int\).*use a str"):
        _ = table["name"] > 1
    with pytest.raises(conch.ExpressionError, match="'name'"):
        table["name"].isin(["a", 2])
    with pytest.raises(conch.ExpressionError, match=r"'name'.*\(name > 1\)"):
        _ = 1 < table["name"]  # noqa: SIM300 (reflected: still the string column)
    # unbound columns (CLI --where, Spark) are checked when the scan is planned
    from conch.expr.syntax import parse

    with pytest.raises(conch.ExpressionError, match="'score'"):
        table.scan(where=parse("score > 'abc'"))
    with pytest.raises(conch.ExpressionError, match="'name'"):
        table.scan(where=conch.Col("name") == 1)
    assert table.scan(where=(table["score"] > 0.6) & (table["name"] == "b")).to_pylist()[0]["id"] == 2
    assert table.scan(where=table["score"] > 0).count() == 2  # int literal on a float column: fine
    unchanged(table)
