"""One behaviour suite for every metastore backend (pyiceberg's catalog-suite style).

A new backend adds one entry to `BACKENDS` (a factory from a scratch directory to a metastore
URI); every test here then runs against it.
"""

from __future__ import annotations

import itertools
import multiprocessing as mp
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from conch.errors import CommitConflictError, TableExistsError, TableNotFoundError, WarehouseError
from conch.log.metastore import Metastore, TableRecord, metastore_from_uri

BACKENDS: dict[str, Callable[[Path], str]] = {
    "sqlite": lambda d: f"sqlite://{d}/meta/_catalog.sqlite",
}


@pytest.fixture(params=sorted(BACKENDS))
def uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return BACKENDS[request.param](tmp_path)


@pytest.fixture
def ms(uri: str) -> Metastore:
    m = metastore_from_uri(uri)
    yield m
    m.close()


def rec(name: str, tid: str | None = None) -> TableRecord:
    return TableRecord(name, tid or f"{name}-id", 1, '{"schema": {}}')


def test_reads_never_create_anything(uri: str, tmp_path: Path) -> None:
    m = metastore_from_uri(uri)
    assert m.list_tables() == []
    with pytest.raises(TableNotFoundError):
        m.get_table("t")
    with pytest.raises(TableNotFoundError):
        m.read_log("t-id")
    assert m.latest_snapshot("t-id") is None and m.snapshots("t-id") == []
    assert not any(tmp_path.rglob("*")), "a read left files behind"
    m.create_table(rec("t"))
    assert [r.name for r in metastore_from_uri(uri).list_tables()] == ["t"]


def test_table_records(ms: Metastore) -> None:
    ms.create_table(rec("b"))
    ms.create_table(rec("a"))
    with pytest.raises(TableExistsError):
        ms.create_table(rec("a", "other-id"))
    assert [r.name for r in ms.list_tables()] == ["a", "b"]
    assert ms.get_table("a") == rec("a")
    assert ms.drop_table("a") == rec("a")
    with pytest.raises(TableNotFoundError):
        ms.drop_table("a")
    assert [r.name for r in ms.list_tables()] == ["b"]


def test_append_is_compare_and_swap_with_increasing_times(ms: Metastore) -> None:
    ms.create_table(rec("t"))
    entries = [ms.append("t-id", i, f'{{"n": {i}}}') for i in range(5)]
    assert [e.seq for e in entries] == [1, 2, 3, 4, 5]
    assert all(a.time < b.time for a, b in itertools.pairwise(entries))
    with pytest.raises(CommitConflictError):
        ms.append("t-id", 3, "{}")
    assert ms.read_log("t-id") == entries
    assert ms.read_log("t-id", 2, 4) == entries[2:4]
    assert ms.last_seq("t-id") == 5
    assert ms.seq_at_time("t-id", entries[2].time) == 3
    assert ms.seq_at_time("t-id", entries[0].time - 1) == 0


def test_dropped_table_ids_are_refused(ms: Metastore) -> None:
    ms.create_table(rec("t", "old"))
    ms.append("old", 0, "{}")
    ms.drop_table("t")
    ms.create_table(rec("t", "new"))
    for call in (lambda: ms.append("old", 1, "{}"), lambda: ms.read_log("old"), lambda: ms.last_seq("old")):
        with pytest.raises(TableNotFoundError):
            call()
    assert ms.read_log("new") == [], "the new table of that name has its own, empty log"


def test_snapshots(ms: Metastore) -> None:
    ms.create_table(rec("t"))
    ms.add_snapshot("t-id", 4, "t/meta/4.json")
    ms.add_snapshot("t-id", 9, "t/meta/9.json")
    ms.add_snapshot("t-id", 9, "t/meta/9-later.json")  # first registration wins
    assert ms.latest_snapshot("t-id") == (9, "t/meta/9.json")
    assert ms.latest_snapshot("t-id", 8) == (4, "t/meta/4.json")
    assert ms.latest_snapshot("t-id", 3) is None
    assert ms.snapshots("t-id") == [(4, "t/meta/4.json"), (9, "t/meta/9.json")]


def test_close_then_reuse(ms: Metastore) -> None:
    ms.create_table(rec("t"))
    ms.close()
    ms.append("t-id", 0, "{}")
    assert ms.last_seq("t-id") == 1


def _child_appends(ms: Metastore, out: mp.Queue) -> None:
    try:
        out.put(ms.append("t-id", ms.last_seq("t-id"), '{"child": true}').seq)
    except Exception as e:  # pragma: no cover - reported to the test
        out.put(repr(e))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_usable_in_a_forked_child(ms: Metastore) -> None:
    """A data-loader worker forked after the parent used the metastore gets its own connection."""
    ms.create_table(rec("t"))
    ms.append("t-id", 0, "{}")
    ctx = mp.get_context("fork")
    out: mp.Queue = ctx.Queue()
    p = ctx.Process(target=_child_appends, args=(ms, out))
    p.start()
    assert out.get(timeout=60) == 2
    p.join(timeout=60)
    assert p.exitcode == 0
    assert ms.append("t-id", 2, "{}").seq == 3, "the parent's connection still works"


def test_unknown_scheme_names_the_supported_ones() -> None:
    with pytest.raises(WarehouseError, match="sqlite://"):
        metastore_from_uri("mongodb://x/y")
