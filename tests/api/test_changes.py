"""The change feed (`Table.changes`), tags and `Table.update` against a model of fresh records.

The model keeps, after every commit, the fresh records of every level as plain dicts (an upsert
sets the written columns, a delete removes the key and its subtree, a child write creates its
parent key). `changes(a, b)` for random versions must equal the difference of the model's states
at `a` and `b`, in every images mode, net and per commit, on a flat table and a nested one, with
compactions and expires (reads before the horizon raise; tagged versions stay readable) in
between. `_version` is the newest commit in the interval that wrote or deleted the key (or
deleted an ancestor).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule

import conch

KEYS = st.integers(min_value=0, max_value=9)
INTS = st.one_of(st.none(), st.integers(min_value=-3, max_value=3))
STRS = st.one_of(st.none(), st.sampled_from(["p", "q"]))
ROOT = ("a", "g.x")
Key = tuple[Any, ...]
Rec = dict[str, Any]


def _row(rec: Rec, depth: int) -> Rec:
    if depth == 1:
        return {"a": rec.get("a"), "g": {"x": rec.get("g.x")}}
    return {"v": rec.get("v")}


class ChangesMachine(RuleBasedStateMachine):
    nested = True

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="conch-changes-")
        self.opts = conch.WriteOptions(chunk_rows=4, fragment_bytes=64)
        # versions[seq] = (root records, child records, {key: seq touched}) after commit seq
        self.states: dict[int, tuple[dict[Key, Rec], dict[Key, Rec]]] = {0: ({}, {})}
        self.touched: dict[int, tuple[set[Key], set[Key]]] = {}  # seq -> (root keys, child keys) touched
        self.tagged: dict[str, int] = {}
        self.all_kids: set[Key] = set()

    @initialize()
    def create(self) -> None:
        self.cat = conch.connect(self.dir, write_options=self.opts, maintenance=conch.Policy(settle_after=None))
        schema = [("a", pa.int64()), ("g", pa.struct([("x", pa.string())]))]
        if self.nested:
            schema.append(("items", pa.list_(pa.struct([("$", pa.uint8()), ("v", pa.int64())]))))
        self.t = self.cat.create_table("m", [("k", pa.int64())], pa.schema(schema))

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _latest(self) -> tuple[dict[Key, Rec], dict[Key, Rec]]:
        return self.states[max(self.states)]

    def _state(self, seq: int) -> tuple[dict[Key, Rec], dict[Key, Rec]]:
        return self.states[max(s for s in self.states if s <= seq)]

    def _record(
        self, commit: Any, roots: dict[Key, Rec], kids: dict[Key, Rec], touched: tuple[set[Key], set[Key]]
    ) -> None:
        self.states[commit.seq] = (roots, kids)
        self.touched[commit.seq] = touched

    @rule(
        keys=st.lists(KEYS, min_size=1, max_size=6, unique=True),
        cols=st.lists(st.sampled_from(ROOT), min_size=1, max_size=2, unique=True),
        data=st.data(),
    )
    def upsert(self, keys: list[int], cols: list[str], data: st.DataObject) -> None:
        vals = {
            c: data.draw(st.lists(STRS if c == "g.x" else INTS, min_size=len(keys), max_size=len(keys))) for c in cols
        }
        table: dict[str, Any] = {"k": pa.array(keys, pa.int64())}
        if "a" in vals:
            table["a"] = pa.array(vals["a"], pa.int64())
        if "g.x" in vals:
            table["g"] = pa.StructArray.from_arrays([pa.array(vals["g.x"], pa.string())], names=["x"])
        commit = self.t.write(pa.table(table))
        roots, kids = (dict(m) for m in self._latest())
        for i, k in enumerate(keys):
            rec = dict(roots.get((k,), {}))
            rec.update({c: vals[c][i] for c in cols})
            roots[(k,)] = rec
        self._record(commit, roots, kids, ({(k,) for k in keys}, set()))

    @precondition(lambda self: self.nested)
    @rule(rows=st.lists(st.tuples(KEYS, st.integers(0, 2)), min_size=1, max_size=5, unique=True), data=st.data())
    def upsert_children(self, rows: list[tuple[int, int]], data: st.DataObject) -> None:
        vs = data.draw(st.lists(INTS, min_size=len(rows), max_size=len(rows)))
        table = pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.int64()),
                "items": pa.array([r[1] for r in rows], pa.uint8()),
                "v": pa.array(vs, pa.int64()),
            }
        )
        commit = self.t.write(table, level="items")
        roots, kids = (dict(m) for m in self._latest())
        for r, v in zip(rows, vs, strict=True):
            kids[r] = {"v": v}
            self.all_kids.add(r)
            roots.setdefault((r[0],), {})
        self._record(commit, roots, kids, ({(r[0],) for r in rows}, set(rows)))

    @rule(keys=st.lists(KEYS, min_size=1, max_size=4))
    def delete(self, keys: list[int]) -> None:
        commit = self.t.delete(keys)
        roots, kids = (dict(m) for m in self._latest())
        gone = {(k,) for k in keys}
        # an ancestor's delete touches every child key under it (`_version` counts it)
        touched_kids = {c for c in self.all_kids if c[:1] in gone}
        for k in gone:
            roots.pop(k, None)
        for c in touched_kids:
            kids.pop(c, None)
        self._record(commit, roots, kids, (gone, touched_kids))

    @precondition(lambda self: self.nested)
    @rule(rows=st.lists(st.tuples(KEYS, st.integers(0, 2)), min_size=1, max_size=3))
    def delete_children(self, rows: list[tuple[int, int]]) -> None:
        commit = self.t.delete(rows, level="items")
        roots, kids = (dict(m) for m in self._latest())
        for r in rows:
            kids.pop(r, None)
        self._record(commit, roots, kids, (set(), set(rows)))

    @rule(lo=st.integers(-3, 3), value=INTS)
    def update(self, lo: int, value: int | None) -> None:
        """Set `a` and `g.x` where a > lo."""
        t = self.t
        commit = t.update(where=t["a"] > lo, set={"a": value, "g.x": "u"})
        roots, kids = (dict(m) for m in self._latest())
        hit = {k for k, r in roots.items() if r.get("a") is not None and r["a"] > lo}
        for k in hit:
            roots[k] = {**roots[k], "a": value, "g.x": "u"}
        self._record(commit, roots, kids, (hit, set()))

    @rule()
    def compact(self) -> None:
        self.t.compact()

    @rule(n=st.integers(1, 6))
    def expire(self, n: int) -> None:
        self.t.expire(retain_last=n)
        self.t.vacuum(older_than_seconds=0)

    @precondition(lambda self: len(self.touched) > 0)
    @rule()
    def tag(self) -> None:
        seq = self.t.state().seq
        name = f"t{len(self.tagged)}"
        self.t.tag(name)
        self.tagged[name] = seq

    @precondition(lambda self: len(self.touched) > 0)
    @rule(data=st.data(), images=st.sampled_from(["after", "before_and_after", "keys"]), per_commit=st.booleans())
    def changes(self, data: st.DataObject, images: str, per_commit: bool) -> None:
        last = self.t.state().seq
        horizon_v = self._horizon_version()
        choices = sorted({*range(horizon_v, last + 1), *self.tagged.values()} - ({0} if horizon_v else set()))
        a = data.draw(st.sampled_from([*choices, *self.tagged]))
        since = self.tagged[a] if isinstance(a, str) else a
        b = data.draw(st.sampled_from([s for s in choices if s >= since] or [last]))
        per_commit = per_commit and since >= horizon_v  # per commit reads every version between
        levels = [("", 1), ("items", 2)] if self.nested else [("", 1)]
        times = {c.seq: c.time for c in self.t.history()}
        for level, depth in levels:
            got = self.t.changes(a, b, images=images, per_commit=per_commit, level=level or None).to_pylist()
            want = self._want(since, b, depth, images, per_commit)
            for r in got:
                assert r.pop("_time") == times[r["_version"]]
                if since < horizon_v and not per_commit:
                    r.pop("_version")  # under the horizon some runs are gone: documented fallback
            if since < horizon_v and not per_commit:
                for r in want:
                    r.pop("_version")
            assert got == want, f"changes({a!r}, {b}) level={level!r} images={images} per_commit={per_commit}"

    def _horizon_version(self) -> int:
        h = self.t.state().horizon
        return next((c.seq for c in self.t.history() if c.time == h), 0) if h else 0

    def _want(self, a: int, b: int, depth: int, images: str, per_commit: bool) -> list[Rec]:
        if per_commit:
            out = []
            for c in range(a + 1, b + 1):
                out += self._diff(
                    c - 1, c, depth, images, {k: c for k in self.touched.get(c, (set(), set()))[depth - 1]}
                )
            return out
        last_touch: dict[Key, int] = {}
        for c in range(a + 1, b + 1):
            for k in self.touched.get(c, (set(), set()))[depth - 1]:
                last_touch[k] = c
        return self._diff(a, b, depth, images, last_touch)

    def _diff(self, a: int, b: int, depth: int, images: str, version: dict[Key, int]) -> list[Rec]:
        before, after = self._state(a)[depth - 1], self._state(b)[depth - 1]
        out = []
        for k in sorted(set(before) | set(after)):
            x, y = before.get(k), after.get(k)
            if x is not None and y is not None and _row(x, depth) == _row(y, depth):
                continue
            change = "insert" if x is None else "delete" if y is None else "update"
            row: Rec = {"k": k[0]} if depth == 1 else {"k": k[0], "items": k[1]}
            row.update({"_change": change, "_version": version[k]})
            if images != "keys":
                row.update(_row(y or {}, depth))
            if images == "before_and_after":
                row["_before"] = _row(x, depth) if x is not None else None
            out.append(row)
        return out


class FlatChangesMachine(ChangesMachine):
    nested = False


SETTINGS = settings(
    max_examples=30, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
ChangesMachine.TestCase.settings = SETTINGS
FlatChangesMachine.TestCase.settings = SETTINGS
test_changes_match_model_nested = ChangesMachine.TestCase
test_changes_match_model_flat = FlatChangesMachine.TestCase


# ----- examples -------------------------------------------------------------------------------
@pytest.fixture
def table(catalog: conch.Catalog) -> conch.Table:
    return catalog.create_table("c", [("id", pa.int64())])


def test_changes_cost_follows_the_interval(table: conch.Table) -> None:
    """Only the keys the interval's commits named are looked up, whatever the table's size."""
    table.write(pa.table({"id": pa.array(range(2000), pa.int64()), "x": pa.array(range(2000), pa.int64())}))
    v = table.state().seq
    table.write([{"id": 5, "x": -1}, {"id": 7, "x": 7}])
    ch = table.changes(v)
    assert ch.to_pylist() == [
        {"id": 5, "_change": "update", "_version": v + 1, "_time": table.history()[v].time, "x": -1}
    ]
    assert ch.scanned_keys == 2


def test_changes_since_and_until_take_tags_and_times(table: conch.Table) -> None:
    c1 = table.write([{"id": 1, "x": 1}])
    table.tag("start")
    c3 = table.write([{"id": 2, "x": 2}])
    by_tag = table.changes("start").to_pylist()
    assert [r["id"] for r in by_tag] == [2]
    from conch.model.time import format_time

    assert table.changes(format_time(c1.time), c3.seq).to_pylist() == by_tag
    with pytest.raises(conch.TimeTravelError, match="no tag 'nope'"):
        table.scan(version="nope")
    with pytest.raises(conch.InvalidArgumentError, match="images="):
        table.changes(0, images="both")


def test_tags_survive_expire_and_vacuum_and_untag_reclaims(table: conch.Table, tmp_path: Path) -> None:
    pinned_v = table.write([{"id": 1, "x": 1}, {"id": 2, "x": 2}]).seq
    table.tag("trained")
    pinned = table.scan(version="trained").to_pylist()
    for i in range(3):
        table.write([{"id": 1, "x": 10 + i}])
    table.compact()
    table.expire(retain_last=1)
    table.vacuum(older_than_seconds=0)
    assert table.scan(version="trained").to_pylist() == pinned
    assert table.scan(asof="trained").to_pylist() == pinned
    assert table.tags() == {"trained": pinned_v}
    with pytest.raises(conch.TimeTravelError, match="horizon"):
        table.scan(version=pinned_v + 1)
    with pytest.raises(conch.InvalidArgumentError, match="already has tag"):
        table.tag("trained")
    table.untag("trained")
    reclaimed = table.vacuum(older_than_seconds=0)
    assert reclaimed.expired_files > 0
    with pytest.raises(conch.TimeTravelError, match="horizon"):
        table.scan(version=pinned_v)
    # the files of every readable version are all still there
    assert table.scan().to_pylist() == [{"id": 1, "x": 12}, {"id": 2, "x": 2}]


def test_update_writes_only_the_named_cells(table: conch.Table) -> None:
    table.write([{"id": 1, "x": 1, "y": "a"}, {"id": 2, "x": 5, "y": "b"}, {"id": 3, "x": None, "y": "c"}])
    v = table.state().seq
    commit = table.update(where=table["x"] > 2, set={"y": table["y"] == "b", "x": lambda r: pa.compute.add(r["x"], 1)})
    assert commit.kind == "update"
    assert table.to_arrow().to_pylist() == [
        {"id": 1, "x": 1, "y": "a"},
        {"id": 2, "x": 6, "y": "true"},
        {"id": 3, "x": None, "y": "c"},
    ]
    assert [r["id"] for r in table.changes(v).to_pylist()] == [2]
    table.update(set={"x": 0})  # every record
    assert [r["x"] for r in table.to_arrow().to_pylist()] == [0, 0, 0]
    with pytest.raises(conch.ColumnNotFoundError):
        table.update(where=table["x"] > 0, set={"nope": 1})


def test_cli_tag_untag_tags_changes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from conch.apps.cli import app

    wh = tmp_path / "wh"
    t = conch.connect(wh).create_table("t", [("id", pa.int64())])
    first = t.write([{"id": 1, "x": 1}]).seq
    t.write([{"id": 2, "x": 2}])

    def cli(*args: str) -> str:
        out = CliRunner().invoke(app, ["--warehouse", str(wh), *args], env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        return out.output

    assert "tagged version 1 as 'v1'" in cli("tag", "t", "v1", "--version", str(first))
    assert cli("tags", "t").split()[:3] == ["v1", "version", "1"]
    shown = cli("changes", "t", "--since", "v1", "--images", "after")
    assert "1 changed keys" in shown and "insert" in shown
    cli("untag", "t", "v1")
    assert "no tags" in cli("tags", "t")
    with pytest.raises(conch.TimeTravelError, match="neither a tag"):
        t.changes("v1")
