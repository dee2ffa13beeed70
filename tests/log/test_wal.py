"""The WAL: typed operations, one codec (old entries still read), pure replay, conflict rules."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import conch
from conch.errors import CommitConflictError
from conch.files.manifest import Fragment, KeySpace, TableState
from conch.log import wal
from conch.log.metastore.base import LogEntry
from conch.model.schema import Schema

SCHEMA = Schema.empty(pa.schema([("id", pa.int64())]))

ids = st.text("abcdef0123456789", min_size=1, max_size=8)
key_spaces = st.builds(
    KeySpace,
    id=ids,
    level=st.sampled_from(["", "scenes"]),
    path=ids.map(lambda i: f"t/keys/{i}.vortex"),
    rows=st.integers(0, 10**9),
    min_key=st.just("00"),
    max_key=st.just("ff"),
    kind=st.sampled_from(["data", "tombstone"]),
    time=st.sampled_from([0, 1_700_000_000_000_000]),
    bytes=st.integers(0, 10**9),
    checksum=st.sampled_from(["", "xxh3:1234"]),
)
fragments = st.builds(
    Fragment,
    id=ids,
    level=st.just(""),
    group=st.sampled_from(["", "audio"]),
    key_space=ids,
    start=st.integers(0, 10**6),
    rows=st.integers(1, 10**6),
    path=ids.map(lambda i: f"t/cg/_root/{i}.vortex"),
    column_ids=st.lists(st.integers(1, 2**31), max_size=3).map(tuple),
    stats=st.just(""),
    blob_columns=st.lists(st.integers(1, 2**31), max_size=2).map(tuple),
)
ops = st.one_of(
    key_spaces.map(wal.AddKeySpace),
    fragments.map(wal.AddFragment),
    ids.map(wal.RemoveKeySpace),
    ids.map(wal.RemoveFragment),
    st.just(wal.Truncate()),
    st.integers(0, 2**62).map(wal.VacuumCutoff),
    st.builds(wal.RegisterSnapshot, st.integers(0, 10**6), ids),
    st.builds(wal.DropColumns, st.lists(st.integers(1, 2**31), max_size=3).map(tuple)),
    st.builds(wal.RenameColumn, st.integers(1, 2**31), ids),
    st.just(wal.SetSchema(SCHEMA)),
)
entries = st.builds(
    wal.Entry,
    kind=st.sampled_from(["write", "delete", "vacuum", "flush"]),
    ops=st.lists(ops, max_size=6).map(tuple),
    summary=st.text(max_size=20),
    extra=st.sampled_from([{}, {"rows": {"": 3}}, {"added_columns": ["x"]}]),
)


@settings(deadline=None, max_examples=200)
@given(entries)
def test_codec_round_trips_every_operation(entry: wal.Entry) -> None:
    assert wal.decode(wal.encode(entry)) == entry


def test_entries_written_before_the_format_had_a_version_still_read() -> None:
    """Verbatim entries of the untyped format (no "v"), as tables on disk hold them."""
    schema_json = SCHEMA.extend([pa.field("x", pa.float64())])[0].to_json()
    old_write = (
        '{"kind":"write","ops":[{"op":"add_columns","schema":SCHEMA},'
        '{"op":"add_key_space","id":"k1","level":"","path":"t/keys/k1.vortex","rows":2,"min_key":"00","max_key":"01",'
        '"kind":"data","bytes":10},'
        '{"op":"add_fragment","id":"f1","level":"","group":"","key_space":"k1","start":0,"rows":2,'
        '"path":"t/cg/_root/f1.vortex","column_ids":[1],"stats":"","bytes":20,"meta_bytes":5,"blob_columns":[]}],'
        '"summary":"2 rows at root"}'
    ).replace("SCHEMA", __import__("json").dumps(schema_json))
    old_vacuum = '{"kind":"vacuum","ops":[],"summary":"grace 0s","cutoff_us":1700000000000000}'
    old_spark = '{"kind":"overwrite","ops":[{"op":"truncate"}],"summary":"Spark","rows":{"":7}}'
    w, v, s = (wal.decode(e) for e in (old_write, old_vacuum, old_spark))
    assert [type(op) for op in w.ops] == [wal.SetSchema, wal.AddKeySpace, wal.AddFragment]
    assert w.ops[2] == wal.AddFragment(
        Fragment("f1", "", "", "k1", 0, 2, "t/cg/_root/f1.vortex", (1,), "", bytes=20)
    ), "fields dropped since (meta_bytes) are ignored"
    assert v.ops == (wal.VacuumCutoff(1_700_000_000_000_000),)
    assert s.ops == (wal.Truncate(),) and s.extra == {"rows": {"": 7}}
    state = wal.replay(TableState(SCHEMA), [LogEntry(1, 100, old_write), LogEntry(2, 200, old_spark)])
    assert state.seq == 2 and not state.key_spaces and state.schema.has_column("x")


def test_a_newer_format_is_refused_with_a_message() -> None:
    with pytest.raises(conch.ConchError, match="upgrade"):
        wal.decode('{"v": 99, "kind": "write", "ops": []}')
    with pytest.raises(conch.CorruptFileError, match="log entry"):
        wal.decode('{"kind": "write", "ops": [{"op": "add_key_space"}]')


def test_apply_is_pure_and_states_are_read_only() -> None:
    ks = KeySpace("k1", "", "t/keys/k1.vortex", 1, "00", "00")
    before = TableState(SCHEMA)
    after = wal.apply(before, wal.Entry("write", (wal.AddKeySpace(ks),)), seq=1, time=123)
    assert not before.key_spaces and before.seq == 0
    assert after.key_spaces["k1"].time == 123 and after.key_spaces["k1"].seq == 1
    with pytest.raises(TypeError):
        after.key_spaces["k2"] = ks  # type: ignore[index]
    with pytest.raises(AttributeError):
        after.seq = 5  # type: ignore[misc]
    gone = wal.apply(after, wal.Entry("compact", (wal.RemoveKeySpace("k1"),)), seq=2, time=124)
    assert "k1" in after.key_spaces and "k1" not in gone.key_spaces


def _txn(**kw: object) -> wal.Transaction:
    return wal.Transaction("write", **kw)  # type: ignore[arg-type]


def test_conflict_rules() -> None:
    state = TableState(SCHEMA)
    vacuum_late = wal.Entry("vacuum", (wal.VacuumCutoff(2_000_000),))
    vacuum_early = wal.Entry("vacuum", (wal.VacuumCutoff(1_000),))
    blind = wal.Entry("write", (wal.AddKeySpace(KeySpace("k9", "", "p", 1, "00", "00")),))
    writer = _txn(files=("a.vortex",), started_us=1_000_000)
    assert wal.conflicts(writer, [blind, vacuum_early], state) is None, "blind upserts never conflict"
    assert "vacuum" in (wal.conflicts(writer, [vacuum_late], state) or "")
    assert wal.conflicts(_txn(started_us=1_000_000), [vacuum_late], state) is None, "no files, nothing to lose"
    compaction = _txn(ops=(wal.RemoveKeySpace("k1"),))
    assert "removed" in (wal.conflicts(compaction, [], state) or ""), "inputs must still be live"

    x, _ = SCHEMA.extend([pa.field("x", pa.int64())])
    y, _ = SCHEMA.extend([pa.field("y", pa.int64())])
    x_float, _ = SCHEMA.extend([pa.field("x", pa.float64())])
    x_group, _ = SCHEMA.extend([pa.field("x", pa.struct([("a", pa.int64())]))])
    current = TableState(x, seq=1)
    assert wal.conflicts(_txn(base_schema=SCHEMA, schema=x), [], current) is None, "same column, same type"
    assert wal.conflicts(_txn(base_schema=SCHEMA, schema=y), [], current) is None, "disjoint columns"
    assert "'x'" in (wal.conflicts(_txn(base_schema=SCHEMA, schema=x_float), [], current) or "")
    assert "'x.a'" in (wal.conflicts(_txn(base_schema=SCHEMA, schema=x_group), [], current) or "")
    merged = wal.rebase(_txn(base_schema=SCHEMA, schema=y), current, [], "t")
    assert isinstance(merged.ops[0], wal.SetSchema)
    assert [c.full_path for c in merged.ops[0].schema.columns] == ["x", "y"]
    assert merged.added_columns == ("y",)
    with pytest.raises(CommitConflictError, match="nothing was committed"):
        wal.rebase(_txn(base_schema=SCHEMA, schema=x_float), current, [], "t")


def _add_column(warehouse: str, column: str, row: int, out: mp.Queue) -> None:
    t = conch.connect(warehouse).table("t")
    try:
        c = t.write([{"id": row, column: float(row)}])
        out.put(("ok", c.seq, c.added_columns))
    except conch.ConchError as e:  # pragma: no cover - reported to the test
        out.put(("error", type(e).__name__, str(e)))


@pytest.mark.parametrize("same_column", [True, False], ids=["same-column", "different-columns"])
def test_concurrent_schema_additions_from_four_processes_all_commit(tmp_path: Path, same_column: bool) -> None:
    """Issue 8 item 6: four processes each writing a first row with a new column."""
    warehouse = str(tmp_path / "w")
    conch.connect(warehouse).create_table("t", [("id", pa.int64())])
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    columns = ["v"] * 4 if same_column else ["a", "b", "c", "d"]
    procs = [ctx.Process(target=_add_column, args=(warehouse, c, i, out)) for i, c in enumerate(columns)]
    for p in procs:
        p.start()
    results = [out.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [r[0] for r in results] == ["ok"] * 4, results
    t = conch.connect(warehouse).table("t")
    assert sorted(t.schema.columns) == sorted(set(columns))
    rows = {r["id"]: r for r in t.scan().to_pylist()}
    for i, c in enumerate(columns):
        assert rows[i][c] == float(i), "every write's cells are readable under its column"
        assert all(rows[i][o] is None for o in set(columns) - {c})
    writes = [c for c in t.history() if c.kind == "write"]  # (automatic compactions add no columns)
    assert [c.added_columns for c in writes].count(()) < 4, "history says which writes added columns"
