"""Key columns are first-class (issue 8 item 11): usable in `where=` (turned into key ranges
where the term allows, else evaluated exactly on the keys) and in projections, from Python and
the CLI; `KeyRange` takes scalars for a one-column key."""

from __future__ import annotations

import operator
import subprocess
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.expr.tree import Col
from helpers import run_cli

OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq, "!=": operator.ne}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory) -> tuple[conch.Table, dict[int, float | None]]:
    opts = conch.WriteOptions(chunk_rows=16, fragment_bytes=256)
    t = conch.connect(tmp_path_factory.mktemp("w"), write_options=opts).create_table("t", [("id", pa.int32())])
    model: dict[int, float | None] = {}
    t.write({"id": list(range(0, 60)), "x": [float(i % 7) for i in range(60)]})
    t.write({"id": list(range(40, 90, 2)), "x": [None if i % 3 else float(-i) for i in range(40, 90, 2)]})
    t.delete([5, 41, 80])
    for i in range(60):
        model[i] = float(i % 7)
    for i in range(40, 90, 2):
        model[i] = None if i % 3 else float(-i)
    for k in (5, 41, 80):
        model.pop(k)
    return t, model


term = st.tuples(st.sampled_from(sorted(OPS)), st.integers(-5, 95))


@settings(deadline=None, max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.lists(term, min_size=1, max_size=3), with_x=st.booleans(), either=st.booleans())
def test_key_filters_match_the_model(table: Any, terms: list[tuple[str, int]], with_x: bool, either: bool) -> None:
    t, model = table
    expr = None
    for op, v in terms:
        e = OPS[op](t["id"], v)
        expr = e if expr is None else expr & e
    assert expr is not None
    if with_x:
        expr = (expr | (t["x"] < 0)) if either else (expr & (t["x"] >= 2))

    def keep(k: int) -> bool:
        ok = all(OPS[op](k, v) for op, v in terms)
        if not with_x:
            return ok
        x = model[k]
        return (ok or (x is not None and x < 0)) if either else (ok and x is not None and x >= 2)

    want = [k for k in sorted(model) if keep(k)]
    got = t.scan("x", where=expr)
    assert got.to_arrow().column("id").to_pylist() == want
    assert got.count() == len(want)
    slow = got.with_options(fast_paths=False).to_arrow().column("id").to_pylist()
    assert slow == want


def test_key_range_pruning_and_projection(tmp_path: Path) -> None:
    # automatic compaction off: the test needs five disjoint key spaces to prune four of them
    catalog = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))
    t = catalog.create_table("t", [("id", pa.uint64())])
    for i in range(5):
        t.write({"id": list(range(i * 100, i * 100 + 100)), "x": [float(i)] * 100})
    scan = t.scan("id", "x", where=(t["id"] >= 120) & (t["id"] < 130))
    assert scan.to_arrow().column("id").to_pylist() == list(range(120, 130))
    assert scan.plan.key_predicate == conch.KeyRange(120, 130) and scan.plan.filter is None
    assert scan.plan.pruned["key_spaces_span"] == 4
    assert scan.metrics().merge == "zip (streamed)"
    assert t.scan("id").to_arrow().schema.names == ["id"]
    assert t.scan("id", "x").schema.names == ["id", "x"]
    assert t.scan(where=Col("id") == 7).to_pylist() == [{"id": 7, "x": 0.0}]
    assert t.scan(keys=conch.KeyRange(10, 12)).to_arrow().column("id").to_pylist() == [10, 11]
    assert t.scan(where=t["id"] > 2.5).count() == 497  # not a u64 literal: evaluated exactly
    assert t.scan(where=t["id"].isin([3, 9, 1000])).to_arrow().column("id").to_pylist() == [3, 9]


def test_multi_column_keys(catalog: conch.Catalog) -> None:
    t = catalog.create_table("m", [("a", pa.string()), ("b", pa.int64())])
    rows = [{"a": a, "b": b, "v": i} for i, (a, b) in enumerate((a, b) for a in "pqrs" for b in range(5))]
    t.write(rows)
    got = t.scan("a", "b", "v", where=(t["a"] == "q") & (t["b"] >= 3)).to_pylist()
    assert got == [r for r in rows if r["a"] == "q" and r["b"] >= 3]
    got = t.scan(where=(t["a"] >= "r") | (t["b"] == 0)).to_pylist()
    assert got == [r for r in rows if r["a"] >= "r" or r["b"] == 0]


def test_cli_keys_where_and_columns(tmp_path: Path) -> None:
    w = str(tmp_path / "w")
    t = conch.connect(w).create_table("t", [("id", pa.uint64())])
    t.write({"id": list(range(10)), "x": [float(i) for i in range(10)]})

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return run_cli(w, *args)

    out = cli("scan", "t", "--keys", "3,7,42", "--format", "json", "--output", str(tmp_path / "k.json"))
    assert out.returncode == 0, out.stderr
    text = (tmp_path / "k.json").read_text()
    assert '"id": 3' in text.replace('"id":3', '"id": 3') and "42" not in text
    out = cli("scan", "t", "--where", "id < 3", "--columns", "id,x")
    assert out.returncode == 0, out.stderr
    assert "(3 rows" in out.stdout
    bad = cli("scan", "t", "--keys", "abc")
    assert bad.returncode != 0 and "--keys" in bad.stderr + bad.stdout
