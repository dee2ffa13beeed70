"""The worked examples of spec/000 ("Semantics of Table Scan"), verbatim."""

from __future__ import annotations

import pyarrow as pa

import conch


def test_value_filter_a_ge_b(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("key", pa.int64())])
    t.write(pa.table({"key": [0, 1, 2], "a": [0, 1, 4], "b": [0, 2, 3]}))
    assert t.scan().to_pylist() == [
        {"key": 0, "a": 0, "b": 0},
        {"key": 1, "a": 1, "b": 2},
        {"key": 2, "a": 4, "b": 3},
    ]
    assert t.scan(where=t["a"] >= t["b"]).to_pylist() == [
        {"key": 0, "a": 0, "b": 0},
        {"key": 2, "a": 4, "b": 3},
    ]


def _three_commits(catalog: conch.Catalog) -> tuple[conch.Table, list[conch.Commit]]:
    """| time | key | a |: (1,1,1) (1,2,2) (1,3,3) (2,2,20) (2,3,30) (3,2,5) (3,4,30)."""
    t = catalog.create_table("t", [("key", pa.int64())])
    commits = [
        t.write(pa.table({"key": [1, 2, 3], "a": [1, 2, 3]})),
        t.write(pa.table({"key": [2, 3], "a": [20, 30]})),
        t.write(pa.table({"key": [2, 4], "a": [5, 30]})),
    ]
    return t, commits


def test_fresh_records(catalog: conch.Catalog) -> None:
    t, _ = _three_commits(catalog)
    assert t.scan().to_pylist() == [
        {"key": 1, "a": 1},
        {"key": 2, "a": 5},
        {"key": 3, "a": 30},
        {"key": 4, "a": 30},
    ]


def test_value_filter_does_not_resurrect_stale_cells(catalog: conch.Catalog) -> None:
    t, _ = _three_commits(catalog)
    # Filtering the cells first would make the stale cell (1, 3, 3) fresh and return key 3.
    assert t.scan(where=t["a"] < 10).to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 5}]


def test_value_filter_on_multi_run_table_with_small_fragments(small_files_catalog: conch.Catalog) -> None:
    t, _ = _three_commits(small_files_catalog)
    assert t.scan(where=t["a"] < 10).to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 5}]


def test_time_filtration_hides_newer_updates(catalog: conch.Catalog) -> None:
    t, (c1, c2, _) = _three_commits(catalog)
    assert t.scan(asof=c1.time).to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 2}, {"key": 3, "a": 3}]
    assert t.scan(asof=c2.time).to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 20}, {"key": 3, "a": 30}]
    # asof between commits behaves like the earlier commit
    assert t.scan(asof=c2.time - 1).to_pylist() == t.scan(asof=c1.time).to_pylist()


def test_time_filtration_hides_keys(catalog: conch.Catalog) -> None:
    t, (_, c2, c3) = _three_commits(catalog)
    # Cells before `since` are not considered: key 1 only has a cell at time 1, so it vanishes.
    assert t.scan(since=c2.time).to_pylist() == [{"key": 2, "a": 5}, {"key": 3, "a": 30}, {"key": 4, "a": 30}]
    assert t.scan(since=c3.time).to_pylist() == [{"key": 2, "a": 5}, {"key": 4, "a": 30}]
    assert t.scan(since=c2.time, asof=c2.time).to_pylist() == [{"key": 2, "a": 20}, {"key": 3, "a": 30}]


def test_missing_cells_are_null_and_column_filtration_keeps_keys(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("key", pa.int64())])
    t.write(pa.table({"key": [1, 2], "a": [1, 2]}))
    t.write(pa.table({"key": [3], "b": ["x"]}))
    assert t.scan().to_pylist() == [
        {"key": 1, "a": 1, "b": None},
        {"key": 2, "a": 2, "b": None},
        {"key": 3, "a": None, "b": "x"},
    ]
    # Column filtration removes columns only: key 3 has no `a` cell but still exists.
    assert t.scan("a").to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 2}, {"key": 3, "a": None}]
    # A value filter on a null is not true (three-valued logic).
    assert t.scan("a", where=t["a"] < 5).to_pylist() == [{"key": 1, "a": 1}, {"key": 2, "a": 2}]
    assert t.scan("b", where=t["a"].is_null()).to_pylist() == [{"key": 3, "b": "x"}]


def test_written_null_hides_older_value(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("key", pa.int64())])
    t.write(pa.table({"key": [1], "a": [7]}))
    t.write(pa.table({"key": [1], "a": pa.array([None], pa.int64())}))
    assert t.scan().to_pylist() == [{"key": 1, "a": None}]
    assert t.scan(where=t["a"] == 7).to_pylist() == []
