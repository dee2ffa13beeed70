"""`conch.engines.duckdb.source`: SQL results equal DuckDB over a materialised scan; EXPLAIN and the Conch
scan show what was pushed.

DuckDB drops a predicate from its plan when the source accepts it, so a wrong "yes" would give
wrong answers: the property test runs random WHERE clauses (floats with NaN and null, strings,
struct fields, key ranges and IN lists, NOT/OR/BETWEEN, LIKE which stays in DuckDB) both ways.
"""

from __future__ import annotations

import decimal
from pathlib import Path

import duckdb
import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings

import conch
import conch.engines.duckdb as cdb
from helpers import engine_table


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    return engine_table(tmp_path_factory.mktemp("wh"), lambda i: "b" * (i % 3))


def _atoms() -> st.SearchStrategy[str]:
    op = st.sampled_from(["<", "<=", ">", ">=", "=", "<>"])
    return st.one_of(
        st.builds(lambda o, v: f"x {o} {v}", op, st.sampled_from(["-5.0", "0", "1.5", "3.25", "100"])),
        st.builds(lambda o, v: f"id {o} {v}", op, st.integers(-10, 420)),
        st.builds(lambda o, v: f"g.a {o} {v}", op, st.integers(-1, 4)),
        st.builds(lambda o, v: f"s {o} '{v}'", op, st.sampled_from(["s0", "s3", "zz"])),
        st.builds(lambda a, b: f"id between {a} and {b}", st.integers(0, 300), st.integers(0, 420)),
        st.builds(lambda a: f"x between {a} and {a} + 3", st.sampled_from(["-5.0", "0", "1.5"])),
        st.builds(
            lambda vs: f"id in ({', '.join(map(str, vs))})", st.lists(st.integers(0, 399), min_size=1, max_size=4)
        ),
        st.builds(
            lambda vs: f"s in ({', '.join(repr(v) for v in vs)})", st.lists(st.sampled_from(["s1", "s6"]), min_size=1)
        ),
        st.sampled_from(["x is null", "s is not null", "isnan(x)", "s like 's1%'", "x * 2 > 3", "g.b = 'bb'"]),
    )


def _where() -> st.SearchStrategy[str]:
    return st.recursive(
        _atoms(),
        lambda inner: st.one_of(
            st.builds(lambda a, b: f"({a}) and ({b})", inner, inner),
            st.builds(lambda a, b: f"({a}) or ({b})", inner, inner),
            st.builds(lambda a: f"not ({a})", inner),
        ),
        max_leaves=4,
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    where=_where(), cols=st.sampled_from(["*", "id, x", "s", "g, id", "count(*)"]), push=st.sampled_from([True, None])
)
def test_sql_equals_duckdb_over_the_whole_table(table: conch.Table, where: str, cols: str, push: bool | None) -> None:
    whole = table.scan().to_arrow()  # noqa: F841 - read by DuckDB's replacement scan
    src = cdb.source(table, push_filters=push)  # noqa: F841
    order = "" if cols == "count(*)" else " order by all"
    want = duckdb.sql(f"select {cols} from whole where {where}{order}").fetchall()
    got = duckdb.sql(f"select {cols} from src where {where}{order}").fetchall()
    assert repr(got) == repr(want)  # repr: NaN == NaN


def test_explain_and_the_conch_scan_show_the_pushed_filter(table: conch.Table) -> None:
    scans: list[conch.Scan] = []
    src = cdb.source(table, on_scan=scans.append, push_filters=True)  # noqa: F841 - found by name by DuckDB
    plan = duckdb.sql("explain select id from src where x < 0 and id >= 200 and s like '%3'").fetchall()[0][1]
    assert "PYTHON_ARROW_SCAN" in plan and '"x" < 0' in plan and '"id" >= 200' in plan
    rows = duckdb.sql("select id from src where x < 0 and id >= 200 and s like '%3'").fetchall()
    (sc,) = scans
    assert rows == [] and repr(sc.plan.filter) == "(x < 0.0)"
    assert sc.plan.key_predicate == conch.KeyRange((200,), None)
    assert sc.metrics().rows_out == 0  # Conch filtered: nothing reached DuckDB
    assert [c.path for c in sc.plan.columns] == ["s"]  # x is only filtered on; `g` is never read


def test_in_list_on_the_key_is_a_take(table: conch.Table) -> None:
    scans: list[conch.Scan] = []
    src = cdb.source(table, on_scan=scans.append)  # noqa: F841 - found by name by DuckDB
    rows = duckdb.sql("select id, x from src where id in (3, 7, 10000) order by id").fetchall()
    assert rows == [(3, -9.7), (7, -9.3)]
    assert scans[-1].metrics().keys_out == 2


def test_register_arrow_stream_and_pinned_version(table: conch.Table) -> None:
    src = cdb.source(table)
    con = duckdb.connect()
    cdb.register(con, "t", src)
    (before,) = con.sql("select count(*) from t").fetchall()
    table.write({"id": [1000], "x": [0.5]})
    try:
        assert con.sql("select count(*) from t").fetchall() == [before]  # pinned when `source()` ran
        assert pa.table(src).num_rows == before[0]  # the plain Arrow stream
        assert pa.table(cdb.source(table)).num_rows == before[0] + 1
    finally:
        table.delete([1000])


def _scan_box(plan: str) -> str:
    """The text of EXPLAIN's Python Arrow Scan box (its column of the drawing)."""
    lines = plan.splitlines()
    for i, line in enumerate(lines):
        col = line.find("Python Arrow Scan")
        if col >= 0:
            return "\n".join(x[col - 3 : col + 60] for x in lines[i : i + 12])
    raise AssertionError(plan)


def test_small_tables_keep_value_filters_in_duckdb_for_its_join_planner(table: conch.Table) -> None:
    """DuckDB counts a filter's selectivity only while the filter stays in its plan: by default a
    small table's value filters stay there (the estimate drops), its key terms still go to Conch."""
    src = cdb.source(table)
    n = src.rows()
    assert n is not None and n >= 300 and not src.push_filters  # a few kB stored
    plan = duckdb.sql("explain select s from src where x < 0 and id >= 200").fetchall()[0][1]
    scan = _scan_box(plan)
    assert '"id" >= 200' in scan and '"x" < 0' not in scan  # the key term in Conch, x in DuckDB
    assert "x < 0" in plan and f"~{n} rows" not in plan.split("Python Arrow Scan")[0]  # a 0.2 estimate above it
    took = cdb.source(table, push_filters=True)  # noqa: F841
    plan = duckdb.sql("explain select s from took where x < 0").fetchall()[0][1]
    assert '"x" < 0' in _scan_box(plan) and f"~{n} rows" in plan  # before: always this, a whole-table estimate
    none = cdb.source(table, push_filters=False)  # noqa: F841
    plan = duckdb.sql("explain select s from none where id >= 200").fetchall()[0][1]
    assert "Filters" not in _scan_box(plan)


def test_value_filters_go_to_conch_on_tables_of_filter_min_bytes(
    table: conch.Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cdb, "FILTER_MIN_BYTES", 1)
    scans: list[conch.Scan] = []
    src = cdb.source(table, on_scan=scans.append)
    assert src.push_filters
    whole = table.scan().to_arrow()  # noqa: F841 - read by DuckDB's replacement scan
    want = duckdb.sql("select count(*) from whole where x < 0").fetchall()
    assert duckdb.sql("select count(*) from src where x < 0").fetchall() == want
    assert repr(scans[-1].plan.filter) == "(x < 0.0)"  # before the threshold existed: likewise


KEYS = st.integers(0, 40)


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("write"), st.dictionaries(KEYS, st.integers(-5, 5) | st.none(), min_size=1)),
            st.tuples(st.just("delete"), st.lists(KEYS, min_size=1, max_size=8)),
        ),
        min_size=1,
        max_size=6,
    ),
    where=st.sampled_from(["v < 0", "v >= 2 or v is null", "id between 5 and 30", "id in (1, 7, 33) or v = 3", "true"]),
    push=st.sampled_from([True, None, False]),
)
def test_answers_equal_a_model_after_writes_updates_and_deletes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, object]], where: str, push: bool | None
) -> None:
    """Every run, update and delete: DuckDB over Conch answers what DuckDB answers over the model's
    fresh records (each key's newest write, deleted keys gone), whichever filters Conch takes."""
    t = conch.connect(tmp_path_factory.mktemp("wh")).create_table(
        "m", [("id", pa.int64())], pa.schema([("v", pa.int64())])
    )
    model: dict[int, int | None] = {}
    for kind, arg in ops:
        if kind == "write":
            assert isinstance(arg, dict)
            t.write({"id": list(arg), "v": pa.array(list(arg.values()), pa.int64())})
            model.update(arg)
        else:
            assert isinstance(arg, list)
            t.delete(arg)
            for k in arg:
                model.pop(k, None)
    fresh = pa.table({"id": pa.array(list(model), pa.int64()), "v": pa.array(list(model.values()), pa.int64())})  # noqa: F841
    src = cdb.source(t, push_filters=push)  # noqa: F841 - found by name by DuckDB
    q = "select id, v from {} where " + where + " order by id"
    assert duckdb.sql(q.format("src")).fetchall() == duckdb.sql(q.format("fresh")).fetchall()
    agg = "select count(*), sum(v), min(id) from {} where " + where
    assert duckdb.sql(agg.format("src")).fetchall() == duckdb.sql(agg.format("fresh")).fetchall()


@pytest.fixture(scope="module")
def one_run(tmp_path_factory: pytest.TempPathFactory) -> conch.Table:
    """`table`'s first run alone: no overlay, so the streamed path needs no keys."""
    t = conch.connect(tmp_path_factory.mktemp("wh1")).create_table("t", [("id", pa.int64())])
    t.write(
        engine_table(tmp_path_factory.mktemp("src"), lambda i: "b")
        .scan()
        .to_arrow()
        .filter(pa.compute.field("id") < 250)
    )
    return t


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    which=st.sampled_from(["two runs", "one run"]),
    cols=st.sampled_from([("x",), ("s", "g"), ("g.a", "x")]),
    where=st.sampled_from([None, "x < 0", "s = 's3'", "id >= 120", "keys"]),
    fast=st.booleans(),
    limit=st.none() | st.integers(1, 400),
    compact=st.booleans(),
)
def test_a_scan_without_keys_holds_the_same_values(
    table: conch.Table,
    one_run: conch.Table,
    which: str,
    cols: tuple[str, ...],
    where: str | None,
    fast: bool,
    limit: int | None,
    compact: bool,
) -> None:
    """`ScanOptions.with_keys=False` (what DuckDB gets when it reads no key column; the streamed
    path then reads no keys): the same rows and values as the scan with keys, keys dropped, on
    a table with two overlapping runs and on one run, on every path."""
    table = table if which == "two runs" else one_run
    w = {"x < 0": table["x"] < 0, "s = 's3'": table["s"] == "s3", "id >= 120": table["id"] >= 120}.get(str(where))
    keys = [3, 7, 260, 1000] if where == "keys" else None  # exact keys: the direct take
    scan = table.scan(*cols, where=w, keys=keys, limit=limit).with_options(fast_paths=fast)
    want = scan.to_arrow().drop_columns(["id"])
    bare = scan.with_options(with_keys=False, compact_types=compact)  # compact: dictionaries where stored
    batches = list(bare.to_record_batches())
    got = pa.Table.from_batches([b.cast(want.schema) for b in batches], want.schema)
    assert bare.schema == want.schema
    assert compact or all(b.schema == want.schema for b in batches)
    assert repr(got.to_pylist()) == repr(want.to_pylist())  # repr: NaN == NaN
    m = bare.metrics()
    if fast and which == "one run" and cols == ("x",) and where in (None, "x < 0"):
        assert m.merge == "zip (streamed)"
    if m.merge == "zip (streamed)" and which == "one run":
        assert m.key_bytes_read == 0  # before: every streamed scan read its keys


def _dec(v: int, scale: int) -> decimal.Decimal:
    return decimal.Decimal(v).scaleb(-scale)


ROW = st.tuples(
    st.sampled_from(["A", "N", "R", None]),  # low cardinality: Vortex stores it dictionary-encoded
    st.text(min_size=0, max_size=12) | st.none(),  # high cardinality
    st.integers(-(10**15) + 1, 10**15 - 1) | st.none(),  # decimal(15, 2): decimal64 to DuckDB
    st.integers(-(10**30), 10**30),  # decimal(38, 4): stays decimal128
)


@settings(max_examples=25, deadline=None)
@given(
    runs=st.lists(st.dictionaries(st.integers(0, 3000), ROW, min_size=1, max_size=400), min_size=1, max_size=3),
    deleted=st.lists(st.integers(0, 3000), max_size=20),
    bulk=st.integers(0, 4000),
    compact=st.booleans(),
    where=st.sampled_from(["true", "q < 0", "f = 'N'", "f is null"]),
)
def test_compact_types_give_duckdb_the_same_answers(
    tmp_path_factory: pytest.TempPathFactory,
    runs: list[dict[int, tuple[str | None, str | None, int | None, int]]],
    deleted: list[int],
    bulk: int,
    compact: bool,
    where: str,
) -> None:
    """Key-less DuckDB scans get compact types (`ScanOptions.compact_types`: dictionary strings where
    a fragment stores them dictionary-encoded, decimal64 for decimal(15, 2)): group-bys, sums, and
    every value equal DuckDB over the model's fresh records, over one bulk run (compacted) or
    several runs with overlays, updates and deletes (batches of mixed types, conformed)."""
    t = conch.connect(tmp_path_factory.mktemp("wh")).create_table(
        "m",
        [("id", pa.int64())],
        pa.schema([("f", pa.string()), ("s", pa.string()), ("q", pa.decimal128(15, 2)), ("w", pa.decimal128(38, 4))]),
    )
    model: dict[int, tuple[str | None, str | None, int | None, int]] = {}
    first = {i: ("AN"[i % 2] if i % 7 else "R", f"c{i}", i * 37 - 5000, i) for i in range(3001, 3001 + bulk)}
    for run in [first, *runs] if bulk else runs:
        rows = list(run.values())
        t.write(
            {
                "id": list(run),
                "f": [r[0] for r in rows],
                "s": [r[1] for r in rows],
                "q": pa.array([None if r[2] is None else _dec(r[2], 2) for r in rows], pa.decimal128(15, 2)),
                "w": pa.array([_dec(r[3], 4) for r in rows], pa.decimal128(38, 4)),
            }
        )
        model.update(run)
    if compact:
        t.compact()
    t.delete(deleted)
    for k in deleted:
        model.pop(k, None)
    ids = sorted(model)
    fresh = pa.table(  # noqa: F841 - found by name by DuckDB
        {
            "id": pa.array(ids, pa.int64()),
            "f": [model[i][0] for i in ids],
            "s": [model[i][1] for i in ids],
            "q": pa.array([None if model[i][2] is None else _dec(model[i][2], 2) for i in ids], pa.decimal128(15, 2)),
            "w": pa.array([_dec(model[i][3], 4) for i in ids], pa.decimal128(38, 4)),
        }
    )
    src = cdb.source(t)  # noqa: F841 - found by name by DuckDB
    for q in [
        "select f, count(*), sum(q), avg(q), min(s), max(w), sum(w) from {} where " + where + " group by f order by f",
        "select f, s, q, w from {} where " + where + " order by f, s, q, w",
        "select s, count(*) from {} where " + where + " group by s order by s",
    ]:
        assert duckdb.sql(q.format("src")).fetchall() == duckdb.sql(q.format("fresh")).fetchall()


def test_duckdb_gets_dictionaries_and_decimal64_from_a_compacted_table(tmp_path: Path) -> None:
    """What makes q01 cheaper: Vortex stores a low-cardinality string column dictionary-encoded and
    hands it to DuckDB as a dictionary (codes, no strings materialised), decimal(15, 2) as
    decimal64; a high-cardinality string column stays a string (asking Vortex for a dictionary of
    an FSST column would build one). Scans that read keys keep the table's types."""
    n = 20_000
    t = conch.connect(tmp_path).create_table(
        "m", [("id", pa.int64())], pa.schema([("f", pa.string()), ("s", pa.string()), ("q", pa.decimal128(15, 2))])
    )
    t.write(
        {
            "id": list(range(n)),
            "f": ["AN"[i % 2] for i in range(n)],
            "s": [f"comment {i * 7919 % 100_003}" for i in range(n)],
            "q": pa.array([decimal.Decimal(i).scaleb(-2) for i in range(n)], pa.decimal128(15, 2)),
        }
    )
    src = cdb.source(t)
    names = src.schema.names
    reader = pa.RecordBatchReader._import_from_c_capsule(src.stream([names.index(c) for c in ("f", "s", "q")], [])[0])
    assert reader.schema.field("f").type == pa.dictionary(pa.int32(), pa.string())
    assert reader.schema.field("s").type == pa.string()
    assert reader.schema.field("q").type == pa.decimal64(15, 2)
    got = reader.read_all()
    assert got.column("f").to_pylist() == ["AN"[i % 2] for i in range(n)]
    assert got.column("q").cast(pa.decimal128(15, 2)).equals(t.scan("q").to_arrow().column("q"))
    with_keys = pa.RecordBatchReader._import_from_c_capsule(src.stream([names.index(c) for c in ("id", "f")], [])[0])
    assert with_keys.schema.field("f").type == pa.string()
    assert t.scan("f", "q").to_arrow().schema.field("f").type == pa.string()  # other consumers: unchanged
    assert duckdb.sql("select f, count(*), sum(q) from src group by f order by f").fetchall() == [
        ("A", n // 2, sum(decimal.Decimal(i).scaleb(-2) for i in range(0, n, 2))),
        ("N", n // 2, sum(decimal.Decimal(i).scaleb(-2) for i in range(1, n, 2))),
    ]


def test_batches_of_other_types_are_conformed_to_the_stream_schema() -> None:
    """A stream's types are its first batch's; a later batch of the table's types (an overlaid
    segment, a fragment stored without a dictionary) or compact types is converted, same values."""
    dict_t, d64 = pa.dictionary(pa.int32(), pa.string()), pa.decimal64(15, 2)
    plain = pa.record_batch(
        {"f": ["A", None, "N", "A"], "q": pa.array([decimal.Decimal("1.25"), None, 0, -3], pa.decimal128(15, 2))}
    )
    compact = pa.schema([("f", dict_t), ("q", d64)])
    got = cdb._conform(plain, compact)
    assert got.schema == compact and got.column("f").to_pylist() == plain.column("f").to_pylist()
    assert got.column("q").to_pylist() == plain.column("q").to_pylist()
    back = cdb._conform(got, plain.schema)
    assert back.equals(plain)
