"""One door per question: `Table.scan(...)` is exactly `t.snapshot(asof, version).scan(...)`.

Both accept the same arguments (filters built with `t["x"]`, `t.x`, `_` and text, `since` as a
version's time, a tag, a datetime, an ISO string or µs) and answer the same, records or typed
error; and each record carrying a pinned scan (`Scan`, `Split`, `ScanSpec`, `RangeJob`) carries a
`Snapshot` and a `ScanRequest`, nothing else."""

from __future__ import annotations

import dataclasses
import inspect
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.api.enrich import RangeJob
from conch.api.snapshot import Snapshot
from conch.engines.source import ScanSpec
from conch.errors import ConchError
from conch.expr.syntax import parse
from conch.nested import _
from conch.scan import Split
from conch.scan.request import ScanRequest


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    t = conch.connect(tmp_path_factory.mktemp("door")).create_table("t", [("id", pa.uint64())])
    t.write([{"id": i, "x": float(i), "s": "abc"[i % 3]} for i in range(12)])
    t.tag("first")
    t.write([{"id": i, "x": -float(i)} for i in range(4, 9)])
    t.delete([1, 2])
    t.write([{"id": i, "x": float(i) / 2, "s": "z"} for i in range(10, 16)])
    return t


OPS = ["<", "<=", ">", ">=", "=="]


def _term(draw: Any, t: conch.Table, spelling: str) -> Any:
    """One comparison, spelled one of four ways (the same tree for every spelling but `_`,
    resolved against the scanned level; one filter uses one spelling: nested expressions
    combine only with nested ones)."""
    # `t.<key>` is a core column (`t["id"]`), which does not combine with nested ones: `t.x` only
    column = draw(st.sampled_from(["x"] if spelling == "attr" else ["id", "x"]))
    op = draw(st.sampled_from(OPS))
    value = draw(st.integers(0, 16)) if column == "id" else draw(st.floats(-10, 16, allow_nan=False))
    if spelling == "text":
        return parse(f"{column} {op} {value!r}")
    ref = {
        "item": t[column],
        "attr": getattr(t, column) if column != "id" else t["id"],
        "deferred": getattr(_, column),
    }[spelling]
    return {"<": ref < value, "<=": ref <= value, ">": ref > value, ">=": ref >= value, "==": ref == value}[op]


@st.composite
def _scans(draw: Any, t: conch.Table) -> dict[str, Any]:
    history = t.history()
    where = None
    spelling = draw(st.sampled_from(["item", "attr", "deferred", "text"]))
    for _i in range(draw(st.integers(0, 2))):
        term = _term(draw, t, spelling)
        where = term if where is None else where & term
    since_kind = draw(st.sampled_from(["none", "version", "tag", "datetime", "iso", "us", "unknown tag"]))
    at = draw(st.sampled_from(history)).time
    since = {
        "none": None,
        "version": at,
        "tag": "first",
        "datetime": datetime.fromtimestamp(at / 1e6, UTC),
        "iso": datetime.fromtimestamp(at / 1e6, UTC).isoformat(),
        "us": at,
        "unknown tag": "no such tag",
    }[since_kind]
    pin = draw(st.sampled_from(["latest", "version", "asof"]))
    commit = draw(st.sampled_from(history))
    return {
        "columns": draw(st.sampled_from([(), ("x",), ("s", "x"), ("id",)])),
        "where": where,
        "keys": draw(st.sampled_from([None, [3, 4, 11], conch.KeyRange((5,), (12,))])),
        "since": since,
        "limit": draw(st.sampled_from([None, 0, 3])),
        "asof": commit.time if pin == "asof" else None,
        "version": commit.seq if pin == "version" else None,
    }


def _answer(fn: Any) -> Any:
    try:
        return fn().to_pylist()
    except ConchError as e:
        return type(e)


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_table_scan_is_exactly_the_snapshot_scan(table: conch.Table, data: st.DataObject) -> None:
    a = data.draw(_scans(table))
    args = {k: a[k] for k in ("where", "keys", "since", "limit")}

    def via_table() -> Any:
        return table.scan(*a["columns"], asof=a["asof"], version=a["version"], **args)

    def via_snapshot() -> Any:
        return table.snapshot(a["asof"], a["version"]).scan(*a["columns"], **args)

    assert _answer(via_table) == _answer(via_snapshot), a


def test_both_doors_take_the_same_arguments() -> None:
    door = inspect.signature(Snapshot.scan).parameters
    table = {k: v for k, v in inspect.signature(conch.Table.scan).parameters.items() if k not in ("asof", "version")}
    assert list(door) == list(table)


def test_a_snapshot_lowers_underscore_and_resolves_tags(table: conch.Table) -> None:
    """What only `Table.scan` did before: `_.x` filters and `since=<tag>` on a snapshot."""
    snap = table.snapshot()
    assert snap.scan("x", where=_.x > 7).to_pylist() == table.scan("x", where=table["x"] > 7).to_pylist()
    assert snap.scan(since="first").to_pylist() == table.scan(since="first").to_pylist()


def test_every_pinned_scan_record_is_a_snapshot_and_a_request(table: conch.Table) -> None:
    def fields(cls: Any) -> list[tuple[str, Any]]:
        return [(f.name, f.type) for f in dataclasses.fields(cls)]

    assert [n for n, _t in fields(ScanSpec)] == ["snapshot", "request"]
    assert [n for n, _t in fields(Split)][:2] == ["snapshot", "request"]  # and its execution options
    assert [n for n, _t in fields(RangeJob)][:2] == ["snapshot", "request"]  # and the fn and where it goes
    scan = table.scan("x", where=table["x"] > 2)
    assert isinstance(scan.request, ScanRequest)
    assert {s.request.value_terms for s in scan.splits(3)} == {scan.request.value_terms}
    assert ScanSpec.from_scan(scan).scan().to_pylist() == scan.to_pylist()


def test_a_request_is_resolved_once(tmp_path: Path) -> None:
    """Columns by full path, the filter cut into key and value terms, since in µs."""
    t = conch.connect(tmp_path).create_table("t", [("id", pa.uint64())])
    t.write([{"id": 1, "a": {"b": 1.0}}])
    req = t.snapshot().scan("a", where=(t["id"] > 0) & (t["a.b"] < 2), since="2020-01-01").request
    assert req.columns == ("a.b",)
    assert [repr(e) for e in req.key_terms] == ["(id > 0)"]
    assert [repr(e) for e in req.value_terms] == ["(a.b < 2)"]
    assert req.since == 1577836800000000
