"""Model-based test: the real table against a naive in-memory model of cells.

The model is spec/000 and DESIGN §1 written as plainly as possible: a list of cells
`(key, column, time, value)`, key existence events, and tombstones. Random partial-column
upserts (with written nulls), deletes (whole subtrees), child-level writes, reopening from disk,
flushes (snapshots), vacuums with no grace period, compactions (automatic after every commit, and
explicit with random policies), and scans with key, column, time and value
filtration are checked against it. Column `p` holds binary values large enough to be stored out
of line (blob files), so takes of blob values are checked too.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import conch
from conch.expr.tree import Col, Expr, IsNull, Lit

ROOT_COLS = {"a": pa.int64(), "b": pa.int64(), "g.x": pa.string(), "p": pa.binary()}
KEYS = st.integers(min_value=0, max_value=15)
INTS = st.one_of(st.none(), st.integers(min_value=-5, max_value=5))
STRS = st.one_of(st.none(), st.sampled_from(["p", "q", ""]))
BLOBS = st.one_of(st.none(), st.binary(min_size=0, max_size=48))

SCHEMA = pa.schema(
    [
        ("a", pa.int64()),
        ("b", pa.int64()),
        ("g", pa.struct([("x", pa.string())])),
        ("p", pa.binary()),
        ("items", pa.list_(pa.struct([("$", pa.uint8()), ("v", pa.float64())]))),
    ]
)


@dataclass
class Model:
    """Cells, existence events and tombstones, exactly as the spec defines them."""

    cells: list[tuple[tuple[Any, ...], str, int, Any]] = field(default_factory=list)
    exists: list[tuple[tuple[Any, ...], int]] = field(default_factory=list)  # (full key, time)
    tombs: list[tuple[tuple[Any, ...], int]] = field(default_factory=list)  # (key prefix, time)

    def tomb_time(self, key: tuple[Any, ...], asof: int | None) -> int:
        times = [t for p, t in self.tombs if key[: len(p)] == p and (asof is None or t <= asof)]
        return max(times, default=0)

    def scan(
        self, depth: int, cols: list[str], asof: int | None, since: int | None, keys: Any, where: Any
    ) -> list[dict[str, Any]]:
        def in_window(t: int) -> bool:
            return (asof is None or t <= asof) and (since is None or t >= since)

        live: dict[tuple[Any, ...], int] = {}
        for k, t in self.exists:
            if len(k) == depth and in_window(t):
                live[k] = max(live.get(k, 0), t)
        out = []
        for k in sorted(live):
            if live[k] <= self.tomb_time(k, asof):
                continue
            if keys is not None and not keys(k):
                continue
            rec: dict[str, Any] = {}
            all_cols = sorted(ROOT_COLS) if depth == 1 else ["v"]
            for c in all_cols:
                best = None
                for ck, cc, t, v in self.cells:
                    fresh = ck == k and cc == c and in_window(t) and t > self.tomb_time(k, asof)
                    if fresh and (best is None or t > best[0]):
                        best = (t, v)
                rec[c] = best[1] if best else None
            if where is not None and where[1](rec) is not True:
                continue
            row: dict[str, Any] = {"k": k[0]} if depth == 1 else {"k": k[0], "items": k[1]}
            for c in cols:
                if c == "g.x":
                    row["g"] = {"x": rec[c]}
                else:
                    row[c] = rec[c]
            out.append(row)
        return out


def lt(a: Any, b: Any) -> bool | None:
    return None if a is None or b is None else a < b


FILTERS: list[tuple[Expr, Any]] = [
    (Col("a") < Lit(2), lambda r: lt(r["a"], 2)),
    (Col("b") >= Col("a"), lambda r: None if r["a"] is None or r["b"] is None else r["b"] >= r["a"]),
    (IsNull(Col("a")), lambda r: r["a"] is None),
    (Col("g.x") == Lit("p"), lambda r: None if r["g.x"] is None else r["g.x"] == "p"),
    (
        (Col("a") < Lit(0)) | (Col("g.x") == Lit("q")),
        lambda r: _or(lt(r["a"], 0), None if r["g.x"] is None else r["g.x"] == "q"),
    ),
    (~(Col("a") > Lit(0)), lambda r: None if r["a"] is None else not r["a"] > 0),
]


def _or(x: bool | None, y: bool | None) -> bool | None:
    if x is True or y is True:
        return True
    if x is None or y is None:
        return None
    return False


class TableMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="conch-model-")
        # large_value_bytes=8: most `p` values go to blob files
        self.opts = conch.WriteOptions(chunk_rows=5, fragment_bytes=48, large_value_bytes=8)
        self.model = Model()
        self.times: list[int] = []

    @initialize()
    def create(self) -> None:
        self.cat = conch.connect(self.dir, write_options=self.opts)
        self.t = self.cat.create_table("m", [("k", pa.int64())], SCHEMA)

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()  # waits for a running settle: none writes into a removed directory
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(
        keys=st.lists(KEYS, min_size=1, max_size=12, unique=True),
        cols=st.lists(st.sampled_from(sorted(ROOT_COLS)), max_size=3, unique=True),
        data=st.data(),
    )
    def upsert(self, keys: list[int], cols: list[str], data: st.DataObject) -> None:
        table: dict[str, Any] = {"k": pa.array(keys, pa.int64())}
        values: dict[str, list[Any]] = {}
        for c in cols:
            strategy = {"g.x": STRS, "p": BLOBS}.get(c, INTS)
            values[c] = data.draw(st.lists(strategy, min_size=len(keys), max_size=len(keys)))
        for c in ("a", "b", "p"):
            if c in values:
                table[c] = pa.array(values[c], ROOT_COLS[c])
        if "g.x" in values:
            table["g"] = pa.StructArray.from_arrays([pa.array(values["g.x"], pa.string())], names=["x"])
        commit = self.t.write(pa.table(table))
        self.times.append(commit.time)
        for i, k in enumerate(keys):
            self.model.exists.append(((k,), commit.time))
            for c in cols:
                self.model.cells.append(((k,), c, commit.time, values[c][i]))

    @rule(
        rows=st.lists(st.tuples(KEYS, st.integers(0, 3)), min_size=1, max_size=8, unique=True),
        data=st.data(),
    )
    def upsert_children(self, rows: list[tuple[int, int]], data: st.DataObject) -> None:
        vs = data.draw(
            st.lists(st.one_of(st.none(), st.floats(-2, 2, allow_nan=False)), min_size=len(rows), max_size=len(rows))
        )
        table = pa.table(
            {
                "k": pa.array([r[0] for r in rows], pa.int64()),
                "items": pa.array([r[1] for r in rows], pa.uint8()),
                "v": pa.array(vs, pa.float64()),
            }
        )
        commit = self.t.write(table, level="items")
        self.times.append(commit.time)
        for (k, i), v in zip(rows, vs, strict=True):
            self.model.exists.append(((k, i), commit.time))
            self.model.exists.append(((k,), commit.time))  # ancestors' keys are created
            self.model.cells.append(((k, i), "v", commit.time, v))

    @rule(keys=st.lists(KEYS, min_size=1, max_size=4))
    def delete(self, keys: list[int]) -> None:
        commit = self.t.delete(keys)
        self.times.append(commit.time)
        for k in set(keys):
            self.model.tombs.append(((k,), commit.time))

    @rule(
        keys=st.lists(KEYS, min_size=1, max_size=6, unique=True),
        cols=st.lists(st.sampled_from(sorted(ROOT_COLS)), max_size=2, unique=True),
        data=st.data(),
    )
    def delete_then_rewrite(self, keys: list[int], cols: list[str], data: st.DataObject) -> None:
        """The case that catches resurrection: old cells must stay hidden after a re-insert."""
        self.delete(keys)
        self.upsert(keys, cols, data)

    @rule(rows=st.lists(st.tuples(KEYS, st.integers(0, 3)), min_size=1, max_size=3))
    def delete_children(self, rows: list[tuple[int, int]]) -> None:
        commit = self.t.delete(rows, level="items")
        self.times.append(commit.time)
        for r in set(rows):
            self.model.tombs.append((r, commit.time))

    @rule()
    def flush(self) -> None:
        self.t.flush()

    @rule()
    def vacuum(self) -> None:
        """With no grace period: it must remove nothing a read (or time travel) needs."""
        self.t.vacuum(older_than_seconds=0)

    @rule(
        force=st.booleans(),
        trigger=st.integers(2, 4),
        ratio=st.sampled_from([0.0, 0.5, 100.0]),
        small=st.sampled_from([0, 1 << 30]),
        max_rows=st.integers(1, 12),
    )
    def compact(self, force: bool, trigger: int, ratio: float, small: int, max_rows: int) -> None:
        """A major (L0 + L1 → L1, cut into ranges of at most `max_rows` root keys) or the
        policy's choice (size-tiered L0 merges when `ratio` is large and `small` is 0): every
        read after it, with time travel across it (asof and since), is checked by the scan rules
        against the model. (Automatic compaction with the default policy also runs after every
        write and delete: the default `connect`.)"""
        policy = conch.Policy(l0_trigger=trigger, l1_ratio=ratio, small_bytes=small, max_l1_rows=max_rows)
        self.t.compact(force=force, policy=policy)

    @rule()
    def reopen(self) -> None:
        self.cat.close()
        self.cat = conch.connect(self.dir, write_options=self.opts)
        self.t = self.cat.table("m")

    @precondition(lambda self: len(self.times) > 0)
    @rule(
        cols=st.lists(st.sampled_from(sorted(ROOT_COLS)), max_size=3, unique=True),
        filt=st.one_of(st.none(), st.sampled_from(range(len(FILTERS)))),
        keysel=st.one_of(st.none(), st.lists(KEYS, max_size=5), st.tuples(KEYS, KEYS)),
        time=st.tuples(st.integers(-1, 40), st.integers(-1, 40), st.sampled_from([0, -1, 1])),
    )
    def scan_root(self, cols: list[str], filt: int | None, keysel: Any, time: tuple[int, int, int]) -> None:
        asof, since = self._times(time)
        if self._before_first(asof):
            return
        keys_arg, keys_pred = _keys(keysel)
        where = FILTERS[filt] if filt is not None else None
        got = self.t.scan(*cols, where=where[0] if where else None, keys=keys_arg, asof=asof, since=since).to_pylist()
        shown = cols or sorted(ROOT_COLS)
        want = self.model.scan(1, shown, asof, since, keys_pred, where)
        assert got == want, f"asof={asof} since={since} keys={keysel} where={where and where[0]}"

    @precondition(lambda self: len(self.times) > 0)
    @rule(time=st.tuples(st.integers(-1, 40), st.integers(-1, 40), st.sampled_from([0, -1, 1])))
    def scan_children(self, time: tuple[int, int, int]) -> None:
        asof, since = self._times(time)
        if self._before_first(asof):
            return
        got = self.t.scan(level="items", asof=asof, since=since).to_pylist()
        want = self.model.scan(2, ["v"], asof, since, None, None)
        assert got == want, f"asof={asof} since={since}"

    def _before_first(self, asof: int | None) -> bool:
        """An asof before the first commit is a TimeTravelError naming that commit's time."""
        first = self.t.history()[0].time
        if asof is None or asof >= first:
            return False
        with pytest.raises(conch.TimeTravelError, match="first commit"):
            self.t.scan(asof=asof)
        return True

    def _times(self, spec: tuple[int, int, int]) -> tuple[int | None, int | None]:
        a, s, nudge = spec
        asof = self.times[a % len(self.times)] + nudge if a >= 0 else None
        since = self.times[s % len(self.times)] if s >= 0 else None
        if asof is not None and since is not None and since > asof:
            since, asof = asof, since
        return asof, since

    @invariant()
    def history_is_ordered(self) -> None:
        if hasattr(self, "t"):
            times = [c.time for c in self.t.history()]
            assert times == sorted(times) and len(set(times)) == len(times)


def _keys(sel: Any) -> tuple[Any, Any]:
    if sel is None:
        return None, None
    if isinstance(sel, tuple):
        lo, hi = min(sel), max(sel)
        return conch.KeyRange((lo,), (hi,)), lambda k: lo <= k[0] < hi
    wanted = set(sel)
    return sorted(wanted), lambda k: k[0] in wanted


TableMachine.TestCase.settings = settings(
    max_examples=80,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_table_matches_cell_model = TableMachine.TestCase
