"""Branches (`Table.branch`, `branches`, `drop_branch`, `fast_forward`; `conch.log.branching`).

The model test keeps, per line (the table and each branch), the fresh records after every
commit as plain dicts. Random writes, deletes, compactions, flushes and tags run on random
lines; branches are made from random readable versions or tags of the table, fast-forwarded
(which must conflict exactly when the table changed data since the branch point) and dropped;
expire and vacuum run on either line. After every vacuum: every live line's every retained
version and tag reads exactly what the model says, every file those versions use still exists,
and the files only dropped branches used are gone.
"""

from __future__ import annotations

import contextlib
import pickle
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, precondition, rule

import conch
from conch.errors import BranchNotFoundError, InvalidNameError
from conch.maintain.expire import referenced_files, state_paths

KEYS = st.integers(min_value=0, max_value=9)
VALS = st.one_of(st.none(), st.integers(min_value=-3, max_value=3))
Rec = dict[str, Any]
Model = dict[int, Rec]
MAIN = "main"


def _rows(model: Model) -> list[Rec]:
    return [{"id": k, "a": r.get("a"), "b": r.get("b")} for k, r in sorted(model.items())]


class BranchMachine(RuleBasedStateMachine):
    branches = Bundle("branches")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="conch-branches-")
        # per line: seq -> fresh records after that commit (commits that change no record add none)
        self.models: dict[str, dict[int, Model]] = {MAIN: {0: {}}}
        self.tags: dict[str, dict[str, int]] = {MAIN: {}}
        self.point: dict[str, int] = {}  # branch -> the table's version it branched from / last fast-forward
        self.data_seqs: list[int] = []  # the table's versions that changed data
        self.dropped_files: set[str] = set()  # what dropped branches referenced
        self.n = 0

    @initialize()
    def create(self) -> None:
        opts = conch.WriteOptions(chunk_rows=4, fragment_bytes=64)
        self.cat = conch.connect(self.dir, write_options=opts, maintenance=conch.Policy(settle_after=None))
        self.main = self.cat.create_table("t", [("id", pa.int64())], pa.schema([("a", pa.int64()), ("b", pa.int64())]))
        self.handles: dict[str, conch.Table] = {MAIN: self.main}

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # ----- the model ----------------------------------------------------------------------
    def _at(self, line: str, seq: int) -> Model:
        states = self.models[line]
        return states[max(s for s in states if s <= seq)]

    def _latest(self, line: str) -> Model:
        return {k: dict(r) for k, r in self._at(line, 1 << 60).items()}

    def _record(self, line: str, seq: int, model: Model) -> None:
        self.models[line][seq] = model
        if line == MAIN:
            self.data_seqs.append(seq)

    def _retained(self, line: str) -> list[int]:
        t = self.handles[line]
        h = t.state().horizon
        hist = t.history()
        hv = next((c.seq for c in hist if c.time == h), 0) if h else 0
        return [c.seq for c in hist if c.seq >= hv]

    # ----- rules ---------------------------------------------------------------------------
    @rule(
        data=st.data(),
        keys=st.lists(KEYS, min_size=1, max_size=5, unique=True),
        cols=st.sampled_from([("a",), ("b",), ("a", "b")]),
    )
    def write(self, data: st.DataObject, keys: list[int], cols: tuple[str, ...]) -> None:
        line = data.draw(st.sampled_from(sorted(self.handles)))
        vals = {c: data.draw(st.lists(VALS, min_size=len(keys), max_size=len(keys))) for c in cols}
        table = {"id": pa.array(keys, pa.int64()), **{c: pa.array(v, pa.int64()) for c, v in vals.items()}}
        commit = self.handles[line].write(pa.table(table))
        model = self._latest(line)
        for i, k in enumerate(keys):
            model.setdefault(k, {}).update({c: vals[c][i] for c in cols})
        self._record(line, commit.seq, model)

    @rule(data=st.data(), keys=st.lists(KEYS, min_size=1, max_size=4, unique=True))
    def delete(self, data: st.DataObject, keys: list[int]) -> None:
        line = data.draw(st.sampled_from(sorted(self.handles)))
        commit = self.handles[line].delete(keys)
        model = self._latest(line)
        for k in keys:
            model.pop(k, None)
        self._record(line, commit.seq, model)

    @rule(data=st.data())
    def compact(self, data: st.DataObject) -> None:
        self.handles[data.draw(st.sampled_from(sorted(self.handles)))].compact()

    @rule(data=st.data())
    def flush(self, data: st.DataObject) -> None:
        self.handles[data.draw(st.sampled_from(sorted(self.handles)))].flush()

    @rule(data=st.data())
    def tag(self, data: st.DataObject) -> None:
        line = data.draw(st.sampled_from(sorted(self.handles)))
        t = self.handles[line]
        seq = t.state().seq
        if seq == 0:
            return
        name = f"tag{self.n}"
        self.n += 1
        t.tag(name)
        self.tags[line][name] = seq

    @precondition(lambda self: len(self.handles) < 4)
    @rule(target=branches, data=st.data())
    def branch(self, data: st.DataObject) -> str:
        name = f"b{self.n}"
        self.n += 1
        choices: list[int | str | None] = [None, *self._retained(MAIN), *self.tags[MAIN]]
        at = data.draw(st.sampled_from(choices))  # None: the newest
        seq = self.tags[MAIN][at] if isinstance(at, str) else self.main.state().seq if at is None else at
        b = self.main.branch(name, version=at)
        assert b.name == f"t@{name}" and b.state().seq == 1
        self.handles[name] = b
        self.models[name] = {0: {}, 1: {k: dict(r) for k, r in self._at(MAIN, seq).items()}}
        self.tags[name] = {}
        self.point[name] = seq
        assert {x.name: x.base_version for x in self.main.branches()}[name] == seq
        return name

    @rule(name=branches)
    def fast_forward(self, name: str) -> None:
        if name not in self.handles:
            return
        moved = [s for s in self.data_seqs if s > self.point[name]]
        if moved:
            with pytest.raises(conch.CommitConflictError, match=rf"version {self.point[name]}\b"):
                self.main.fast_forward(name)
            return
        commit = self.main.fast_forward(name)
        self._record(MAIN, commit.seq, self._latest(name))
        self.point[name] = commit.seq
        assert self.main.to_arrow().to_pylist() == self.handles[name].to_arrow().to_pylist()

    @rule(name=consumes(branches))
    def drop_branch(self, name: str) -> None:
        if name not in self.handles:
            return
        self.dropped_files |= referenced_files(self.handles[name].log)
        self.main.drop_branch(name)
        del self.handles[name], self.models[name], self.tags[name], self.point[name]
        with pytest.raises(BranchNotFoundError):
            self.cat.table("t", branch=name)

    @rule(data=st.data())
    def changes(self, data: st.DataObject) -> None:
        """`changes(a, b)` on any line equals the model's difference (a fast-forward included)."""
        line = data.draw(st.sampled_from(sorted(self.handles)))
        t = self.handles[line]
        versions = self._retained(line)
        if t.state().horizon == 0:
            versions = [0, *versions]
        a = data.draw(st.sampled_from(versions))
        b = data.draw(st.sampled_from([v for v in versions if v >= a]))
        got = [(r["id"], r["_change"]) for r in t.changes(a, b, images="keys").to_pylist()]
        before, after = self._at(line, a), self._at(line, b)
        want = []
        for k in sorted(set(before) | set(after)):
            x, y = before.get(k), after.get(k)
            if x is None or y is None:
                want.append((k, "insert" if x is None else "delete"))
            elif _rows({0: x}) != _rows({0: y}):
                want.append((k, "update"))
        assert got == want, f"{line}: changes({a}, {b})"

    @rule(data=st.data(), n=st.integers(1, 5))
    def expire_and_vacuum(self, data: st.DataObject, n: int) -> None:
        lines = sorted(self.handles)
        self.handles[data.draw(st.sampled_from(lines), label="expire")].expire(retain_last=n)
        time.sleep(0.03)  # past the vacuum's clock slack, so the files just written count as old
        self.handles[data.draw(st.sampled_from(lines), label="vacuum")].vacuum(older_than_seconds=0)
        self._check_after_vacuum()

    # ----- the invariant after a vacuum ---------------------------------------------------------
    def _check_after_vacuum(self) -> None:
        storage = self.cat.warehouse.storage
        live_refs: set[str] = set()
        for line, t in self.handles.items():
            live_refs |= referenced_files(t.log)
            versions = {v: v for v in self._retained(line)}
            versions.update(self.tags[line])
            for v, seq in versions.items():
                state = t.state_at(version=v)
                missing = [p for p in state_paths(state) if not storage.exists(p)]
                assert not missing, f"{line} version {v}: files deleted {missing[:3]}"
                got = t.scan(version=v).to_pylist()
                assert got == _rows(self._at(line, seq)), f"{line} version {v}"
        gone = self.dropped_files - live_refs
        left = [p for p in gone if storage.exists(p)]
        assert not left, f"files only dropped branches used were not reclaimed: {left[:3]}"


BranchMachine.TestCase.settings = settings(
    max_examples=20, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_branches_match_model = BranchMachine.TestCase


# ----- examples -------------------------------------------------------------------------------
@pytest.fixture
def table(catalog: conch.Catalog) -> conch.Table:
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": k, "x": k} for k in range(4)])
    return t


def test_branch_writes_are_invisible_on_the_table_and_back(catalog: conch.Catalog, table: conch.Table) -> None:
    before = table.to_arrow().to_pylist()
    dev = table.branch("dev")
    assert dev.name == "t@dev" and dev.to_arrow().to_pylist() == before
    files = {f.path for f in catalog.warehouse.storage.list(table.id)}
    dev.write([{"id": 9, "x": 9, "y": "new"}])  # a new column, on the branch only
    dev.delete([0])
    dev.update(where=dev["x"] == 1, set={"x": 100})
    assert table.to_arrow().to_pylist() == before
    assert table.schema.columns == ["x"]
    table.write([{"id": 5, "x": 5}])
    assert [r["id"] for r in dev.to_arrow().to_pylist()] == [1, 2, 3, 9]
    assert [r["id"] for r in table.to_arrow().to_pylist()] == [0, 1, 2, 3, 5]
    # shared files: the branch copied nothing and writes into the table's directory
    assert files <= {f.path for f in catalog.warehouse.storage.list(table.id)}
    assert not list(catalog.warehouse.storage.list(dev.id))
    # one handle per name; hidden from the table list
    assert catalog.table("t@dev").to_arrow().to_pylist() == dev.to_arrow().to_pylist()
    assert catalog.table("t", branch="dev").name == "t@dev"
    assert table.branch("dev").id == dev.id
    assert catalog.list_tables() == ["t"]
    [b] = table.branches()
    assert (b.name, b.base_version, b.head_version) == ("dev", 1, dev.state().seq)


def test_changes_compaction_and_history_on_a_branch(table: conch.Table) -> None:
    dev = table.branch("dev")
    dev.write([{"id": 1, "x": 10}])
    dev.delete([2])
    got = [(r["id"], r["_change"], r["x"]) for r in dev.changes(1).to_pylist()]
    assert got == [(1, "update", 10), (2, "delete", None)]
    dev.compact()
    dev.expire(retain_last=1)
    dev.vacuum(older_than_seconds=0)
    assert [r["id"] for r in table.to_arrow().to_pylist()] == [0, 1, 2, 3]  # the table lost nothing
    assert [c.kind for c in dev.history(kind=("branch", "write", "delete"))] == ["branch", "write", "delete"]


def test_fast_forward_and_its_conflict(table: conch.Table) -> None:
    dev = table.branch("dev")
    dev.write([{"id": 1, "x": 10, "y": "z"}])
    dev.delete([3])
    dev.compact()
    table.compact()  # maintenance on the table does not block a fast-forward
    table.tag("before")
    commit = table.fast_forward("dev")
    assert commit.kind == "fast_forward"
    assert table.to_arrow().to_pylist() == dev.to_arrow().to_pylist()
    assert table.schema.columns == ["x", "y"]
    keys = [(r["id"], r["_change"]) for r in table.changes("before", images="keys").to_pylist()]
    assert keys == [(1, "update"), (3, "delete")]
    dev.write([{"id": 7, "x": 7}])
    table.fast_forward("dev")  # again: the last fast-forward is the new branch point
    assert table.to_arrow().to_pylist() == dev.to_arrow().to_pylist()
    other = table.branch("other")
    table.write([{"id": 8, "x": 8}])
    other.write([{"id": 9, "x": 9}])
    at, base = table.state().seq, {b.name: b.base_version for b in table.branches()}["other"]
    with pytest.raises(conch.CommitConflictError, match=rf"table is at version {at}.*branch point, its version {base}"):
        table.fast_forward("other")
    assert 9 not in [r["id"] for r in table.to_arrow().to_pylist()]


def test_drop_branch_reclaims_its_files(catalog: conch.Catalog, table: conch.Table) -> None:
    dev = table.branch("dev")
    dev.write([{"id": 5, "x": 5}])
    mine = referenced_files(dev.log) - referenced_files(table.log)
    assert mine
    time.sleep(0.03)
    table.vacuum(older_than_seconds=0)
    storage = catalog.warehouse.storage
    assert all(storage.exists(p) for p in mine)  # a live branch's files stay
    table.drop_branch("dev")
    assert table.branches() == []
    with pytest.raises(conch.TableNotFoundError):
        dev.to_arrow()
    with pytest.raises(BranchNotFoundError, match="has no branch 'dev'"):
        table.drop_branch("dev")
    time.sleep(0.03)
    table.vacuum(older_than_seconds=0)
    assert not any(storage.exists(p) for p in mine)
    assert [r["id"] for r in table.to_arrow().to_pylist()] == [0, 1, 2, 3]


def test_branch_from_a_version_or_tag_and_errors(catalog: conch.Catalog, table: conch.Table) -> None:
    table.tag("v1")
    table.write([{"id": 4, "x": 4}])
    assert table.branch("old", version=1).to_arrow().num_rows == 4
    assert table.branch("tagged", version="v1").to_arrow().num_rows == 4
    with pytest.raises(conch.InvalidArgumentError, match="already has branch 'old', from version 1"):
        table.branch("old", version=2)
    with pytest.raises(InvalidNameError):
        table.branch("no/slash")
    with pytest.raises(conch.InvalidArgumentError, match="is a branch"):
        catalog.table("t@old").branch("x")
    with pytest.raises(conch.InvalidArgumentError, match="reserved"):
        catalog.create_table("_branch.t.x", [("id", pa.int64())])
    with pytest.raises(BranchNotFoundError, match=r"branches: old, tagged"):
        catalog.table("t", branch="nope")
    snap = catalog.table("t@old").snapshot()
    assert pickle.loads(pickle.dumps(snap)).scan().to_arrow().num_rows == 4  # reopened by name
    catalog.drop_table("t")  # its branches go with it
    assert catalog.warehouse.metastore.list_tables() == []


def test_cli_branches(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from conch.apps.cli import app

    wh = tmp_path / "wh"
    t = conch.connect(wh).create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "x": 1}])

    def cli(*args: str) -> str:
        out = CliRunner().invoke(app, ["--warehouse", str(wh), *args], env={"COLUMNS": "200"})
        assert out.exit_code == 0, out.output
        return out.output

    assert "branch 'dev' of table 't' from version 1" in cli("branch", "t", "dev", "--version", "1")
    conch.connect(wh).table("t@dev").write([{"id": 2, "x": 2}])
    assert cli("branches", "t").split()[:5] == ["dev", "base", "version", "1,", "head"]
    assert "│ 2  │ 2 │" in cli("scan", "t@dev")
    assert "fast-forwarded table 't' to branch 'dev'" in cli("fast-forward", "t", "dev")
    cli("drop-branch", "t", "dev")
    assert "no branches" in cli("branches", "t")


def test_vacuums_of_the_table_never_break_a_concurrent_branch_writer(catalog: conch.Catalog) -> None:
    """The table vacuums with no grace period while a branch writes: a branch write whose files
    the vacuum removed conflicts (and is retried by the test), never commits without its files."""
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 0, "x": 0}])
    dev = t.branch("dev")
    stop = threading.Event()
    failures: list[BaseException] = []

    def vacuums() -> None:
        try:
            while not stop.is_set():
                t.vacuum(older_than_seconds=0)
        except BaseException as e:  # reported below
            failures.append(e)

    worker = threading.Thread(target=vacuums)
    worker.start()
    written = set()
    try:
        for i in range(1, 25):
            with contextlib.suppress(conch.CommitConflictError):
                dev.write([{"id": i, "x": i}])
                written.add(i)
    finally:
        stop.set()
        worker.join()
    assert not failures, failures
    storage = catalog.warehouse.storage
    for v in range(1, dev.state().seq + 1):
        assert all(storage.exists(p) for p in state_paths(dev.state_at(version=v)))
    assert [r["id"] for r in dev.to_arrow().to_pylist()] == sorted({0} | written)
    assert [r["id"] for r in t.to_arrow().to_pylist()] == [0]


def doubled(batch: pa.RecordBatch) -> dict[str, Any]:
    """A module-level enrichment (picklable, for worker processes)."""
    return {"x2": pc.multiply(batch.column("x"), 2)}


@pytest.mark.parametrize("workers", [0, 2])
def test_an_enrichment_tried_on_a_branch_then_fast_forwarded(catalog: conch.Catalog, workers: int) -> None:
    """Issue 23's pipeline: try an enrichment on a branch (in process, and in worker processes
    that reopen the branch by its name), look at it, then fast-forward the table to it."""
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": k, "x": k} for k in range(50)])
    trial = t.branch("trial")
    res = trial.enrich(doubled, inputs=["x"], into="f", workers=workers)
    assert res.wrote
    assert trial.scan("f.x2").to_arrow().column("f").to_pylist()[:2] == [{"x2": 0}, {"x2": 2}]
    assert "f.x2" not in t.schema.columns
    t.fast_forward("trial")
    assert [r["f"]["x2"] for r in t.scan("f").to_arrow().to_pylist()] == [2 * k for k in range(50)]


def test_since_inside_a_compaction_from_before_the_branch_point_is_refused(catalog: conch.Catalog) -> None:
    """A run compacted before the branch point holds cells of a window of times; the branch's
    log cannot undo that compaction, so a `since` inside the window is a `TimeTravelError`
    naming the way out, never a silently different answer; a `since` outside it reads."""
    t = catalog.create_table("t", [("id", pa.int64())])
    t.write([{"id": 1, "x": 1}])
    second = t.write([{"id": 2, "x": 2}])
    t.compact()
    dev = t.branch("dev")
    assert t.scan(since=second.time).to_pylist() == [{"id": 2, "x": 2}]  # the table undoes its compaction
    with pytest.raises(conch.TimeTravelError, match="compaction made on another line"):
        dev.scan(since=second.time).to_pylist()
    later = dev.write([{"id": 3, "x": 3}])
    assert dev.scan(since=later.time).to_pylist() == [{"id": 3, "x": 3}]
