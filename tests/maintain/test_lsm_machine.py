"""The LSM state machine (issue 29): the default policy's own maintenance against a record model.

`test_model.py` checks cell semantics on a handful of keys; this one checks the LSM tree where
it gets busy: hundreds to thousands of keys a commit, so the commit-time trigger moves, merges
and majors by itself, the merge splits its output by the columns each row holds, and tombstones
are merged and re-timed. Every step is one of: partial-column writes (a random subset of `v`,
`c0..c2` and the out-of-line binary `b`), a bulk append past every key (a run that overlaps
nothing: the trivial move), deletes of present and absent keys, a delete then a re-insert of
fewer columns, concurrent writers (group commit), `flush`, `vacuum(0)`, `compact()` forced and by
the policy, `compact_minor()`, the settle (`wait_for_maintenance`), `expire`, a branch written
and fast-forwarded, and time travel to an earlier version. After every step the scan equals the
model: the fresh record of every key (a deleted key is gone, a key re-inserted after its
deletion holds only what was written since).

Two policies: the default one (settling only when asked, so steps stay deterministic) and a
scaled-down one whose byte thresholds make moves, merges and majors happen at these sizes.
`CONCH_LSM_STEPS` / `CONCH_LSM_EXAMPLES` run it longer than CI does.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import tempfile
import threading
from typing import Any

import hypothesis.strategies as st
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

import conch
from conch.errors import TimeTravelError
from conch.files.manifest import KeySpace, TableState
from conch.files.storage import new_id
from conch.log.wal import AddKeySpace, RemoveKeySpace, Transaction
from conch.maintain.compaction.timeorder import interleaved, time_contiguous
from conch.model.keys import encode_keys
from conch.model.schema import Schema

KEY_RANGE = 3000  # keys of ordinary writes and deletes: [0, KEY_RANGE); bulk appends go above
BLOB = 700  # bytes of a `b` value: stored out of line

POLICIES = {
    # the default policy, settling only when the machine asks (`wait_for_maintenance`)
    "default": conch.Policy(settle_after=3600.0),
    # its thresholds scaled down so that moves, merges and majors all happen at these sizes
    "scaled": conch.Policy(
        settle_after=3600.0,
        small_bytes=96 << 10,
        l0_read_bytes=16 << 10,
        move_bytes=24 << 10,
        auto_budget_bytes=1 << 20,
        max_l1_rows=1500,
    ),
}

Record = dict[str, Any]
SCHEMA = Schema.empty(pa.schema([("key", pa.int64())]))


def _values(step: int, col: str, n: int) -> pa.Array:
    if col == "b":
        return pa.array([bytes([step % 256]) * BLOB] * n, pa.binary())
    return pa.array([step * 10 + j % 7 for j in range(n)], pa.int64())


def _apply_write(model: dict[int, Record], keys: list[int], cols: dict[str, pa.Array]) -> None:
    for col, arr in cols.items():
        for k, v in zip(keys, arr.to_pylist(), strict=True):
            model.setdefault(k, {})[col] = v


def _read(table: Any, **at: Any) -> dict[int, Record]:
    rows = table.scan(**at).to_arrow().to_pylist()
    return {r.pop("key"): {c: v for c, v in r.items() if v is not None} for r in rows}


class LsmMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.model: dict[int, Record] = {}
        self.versions: dict[int, dict[int, Record]] = {}  # version -> the model then
        self.step = 0
        self.next_key = KEY_RANGE  # bulk appends start here and only go up
        self.branches = 0

    @initialize(policy=st.sampled_from(sorted(POLICIES)))
    def create(self, policy: str) -> None:
        self.cat = conch.connect(self.dir + "/wh", maintenance=POLICIES[policy])
        self.t = self.cat.create_table("k", [("key", pa.int64())])

    def teardown(self) -> None:
        if hasattr(self, "cat"):
            self.cat.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _write(self, table: Any, model: dict[int, Record], keys: list[int], cols: list[str]) -> None:
        self.step += 1
        arrays = {c: _values(self.step, c, len(keys)) for c in cols}
        table.write(pa.table({"key": pa.array(keys, pa.int64()), **arrays}))
        _apply_write(model, keys, arrays)

    # ----- data ---------------------------------------------------------------------------------
    @rule(
        seed=st.integers(0, 2**32 - 1),
        n=st.sampled_from([1, 5, 60, 400, 1500, 2500]),
        cols=st.lists(st.sampled_from(["v", "c0", "c1", "c2", "b"]), min_size=1, max_size=5, unique=True),
    )
    def write(self, seed: int, n: int, cols: list[str]) -> None:
        self._write(self.t, self.model, sorted(random.Random(seed).sample(range(KEY_RANGE), n)), cols)

    @rule(n=st.sampled_from([200, 3000]), blobs=st.booleans())
    def bulk_append(self, n: int, blobs: bool) -> None:
        """Keys above every key so far: a run that overlaps nothing (the trivial move's case)."""
        keys = list(range(self.next_key, self.next_key + n))
        self.next_key += n
        self._write(self.t, self.model, keys, ["v", "b"] if blobs else ["v", "c0"])

    @rule(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 60, 300]), absent=st.integers(0, 5))
    def delete(self, seed: int, n: int, absent: int) -> None:
        rng = random.Random(seed)
        keys = rng.sample(range(self.next_key), n) + [self.next_key + 10_000 + i for i in range(absent)]
        self.t.delete(sorted(set(keys)))
        for k in keys:
            self.model.pop(k, None)

    @rule(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([5, 60, 400]), col=st.sampled_from(["v", "c1", "b"]))
    def delete_then_reinsert(self, seed: int, n: int, col: str) -> None:
        """A key written with many columns, deleted, then written with one: only that one is back."""
        keys = sorted(random.Random(seed).sample(range(KEY_RANGE), n))
        self._write(self.t, self.model, keys, ["v", "c0", "c1", "c2", "b"])
        self.t.delete(keys)
        for k in keys:
            self.model.pop(k, None)
        self._write(self.t, self.model, keys, [col])

    @rule(seed=st.integers(0, 2**32 - 1))
    def concurrent_writes(self, seed: int) -> None:
        """Three writer threads on disjoint keys at once: group commit appends them together."""
        rng = random.Random(seed)
        keys = rng.sample(range(KEY_RANGE), 900)
        parts = [sorted(keys[i::3]) for i in range(3)]
        cols = [rng.sample(["v", "c0", "c1", "c2", "b"], rng.randint(1, 3)) for _ in parts]
        self.step += 1
        step = self.step
        writes = [(p, {c: _values(step + i, c, len(p)) for c in cs}) for i, (p, cs) in enumerate(zip(parts, cols))]
        self.step += len(writes)
        errors: list[BaseException] = []

        def run(keys: list[int], arrays: dict[str, pa.Array]) -> None:
            try:
                self.t.write(pa.table({"key": pa.array(keys, pa.int64()), **arrays}))
            except BaseException as e:  # re-raised in the test's thread
                errors.append(e)

        threads = [threading.Thread(target=run, args=w) for w in writes]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors, errors
        for keys_, arrays in writes:
            _apply_write(self.model, keys_, arrays)

    # ----- maintenance (one rule, so that data steps are most of a run) --------------------------
    @rule(
        action=st.sampled_from(["flush", "vacuum", "compact", "compact_by_policy", "minor", "settle", "expire"]),
        runs=st.sampled_from([None, 2, 3, 5]),
    )
    def maintain(self, action: str, runs: int | None) -> None:
        if action == "flush":
            self.t.flush()
        elif action == "vacuum":
            self.t.vacuum(older_than_seconds=0)
        elif action in ("compact", "compact_by_policy"):
            self.t.compact(force=action == "compact")
        elif action == "minor":
            self.t.compact_minor(runs=runs)
        elif action == "settle":
            assert self.t.wait_for_maintenance(timeout=120)
        else:
            horizon = self.t.expire(retain_last=runs or 4).version
            for v in [v for v in self.versions if v < horizon]:
                del self.versions[v]
                with pytest.raises(TimeTravelError):
                    self.t.scan(version=v).to_arrow()

    @precondition(lambda self: self.branches < 3)
    @rule(seed=st.integers(0, 2**32 - 1), cols=st.lists(st.sampled_from(["v", "c2", "b"]), min_size=1, unique=True))
    def branch_and_fast_forward(self, seed: int, cols: list[str]) -> None:
        """A branch written (and deleted from) on its own, checked, then fast-forwarded to."""
        self.branches += 1
        dev = self.t.branch(f"b{self.branches}")
        mine = {k: dict(r) for k, r in self.model.items()}
        rng = random.Random(seed)
        self._write(dev, mine, sorted(rng.sample(range(KEY_RANGE), 700)), cols)
        gone = sorted(rng.sample(range(KEY_RANGE), 40))
        dev.delete(gone)
        for k in gone:
            mine.pop(k, None)
        assert _read(dev) == mine
        assert _read(self.t) == self.model  # the branch's commits are invisible on the table
        self.t.fast_forward(f"b{self.branches}")
        self.model = mine

    # ----- reads --------------------------------------------------------------------------------
    @precondition(lambda self: len(self.versions) > 1)
    @rule(data=st.data())
    def time_travel(self, data: st.DataObject) -> None:
        # an index, not a version: which versions exist depends on group commit's batching, and
        # hypothesis needs the same draws to replay a run
        versions = sorted(self.versions)
        version = versions[data.draw(st.integers(0, 1 << 16)) % len(versions)]
        assert _read(self.t, version=version) == self.versions[version], f"version {version}"

    @invariant()
    def scan_equals_model(self) -> None:
        if not hasattr(self, "t"):
            return
        got = _read(self.t)
        if got != self.model:
            back = sorted(set(got) - set(self.model))
            lost = sorted(set(self.model) - set(got))
            stale = sorted(k for k in set(got) & set(self.model) if got[k] != self.model[k])
            diff = [(k, sorted(set(got[k].items()) ^ set(self.model[k].items()), key=str)) for k in stale[:2]]
            raise AssertionError(
                f"{len(back)} deleted keys back {back[:5]}, {len(lost)} lost {lost[:5]}, {len(stale)} stale "
                f"(key, cells that differ) {[(k, [(c, repr(v)[:20]) for c, v in d]) for k, d in diff]}; last commits "
                f"{[(c.kind, c.summary) for c in self.t.history()[-6:]]}"
            )
        state = self.t.state()
        assert not interleaved(state), interleaved(state)[:2]  # what `conch check` reports
        if state.seq:  # version 0, before the first commit, is not a version one can read
            self.versions[state.seq] = {k: dict(r) for k, r in self.model.items()}


LsmMachine.TestCase.settings = settings(
    max_examples=int(os.environ.get("CONCH_LSM_EXAMPLES", "5")),
    stateful_step_count=int(os.environ.get("CONCH_LSM_STEPS", "100")),
    deadline=None,
    # no shrinking: a step writes up to thousands of rows, shrinking a failure took > 5 minutes,
    # and the failing run's steps are printed as they are
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
test_lsm_machine = pytest.mark.slow(LsmMachine.TestCase)


@pytest.mark.parametrize("seed", [11, 12, 13, 29])
def test_issue_29_reproduction(tmp_path: Any, seed: int) -> None:
    """The issue's reproduction with nothing but `connect()`'s default policy: 150 commits of
    partial-column writes, out-of-line values and deletes, flushes and `vacuum(0)`."""
    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("k", [("key", pa.int64())])
    state: dict[int, Record] = {}
    for i in range(150):
        rng = random.Random(seed * 1000 + i)
        if rng.random() < 0.2 and i > 0:
            keys = sorted(rng.sample(range(3000), 60))
            t.delete(keys)
            for k in keys:
                state.pop(k, None)
        else:
            keys = sorted(rng.sample(range(3000), rng.randint(200, 2500)))
            cols = {"v": pa.array([i] * len(keys), pa.int64())}
            r = rng.random()
            if r < 0.5:
                cols[f"c{i % 3}"] = pa.array([i * 10 + j % 7 for j in range(len(keys))], pa.int64())
            if r < 0.25:
                cols["b"] = pa.array([bytes([i % 256]) * BLOB for _ in keys], pa.binary())
            t.write(pa.table({"key": pa.array(keys, pa.int64()), **cols}))
            _apply_write(state, keys, cols)
        if i % 4 == 3:
            t.flush()
        if i % 6 == 5:
            t.vacuum(older_than_seconds=0)
        assert _read(t) == state, f"op {i}"
    cat.close()  # waits for a running settle: none outlives the test's directory


def _run(i: int, lo: int, hi: int, time: int, min_time: int = 0, seq: int = 0, kind: str = "data") -> KeySpace:
    enc = [encode_keys([pa.array([k], pa.int64())])[0].as_py().hex() for k in (lo, hi)]
    return KeySpace(f"k{i}", "", f"p{i}", 10, enc[0], enc[1], kind, time, seq or i, min_time=min_time)


def test_a_window_never_splits_runs_that_share_a_time_span() -> None:
    """The cause of issue 29: one merge's outputs (split by the columns they hold) share a span
    `[10, 20]`; a window taking one of them would re-time its tombstone to 10, below the other's
    cells, and relabel its cells at 40 above the other's."""
    a, b = _run(1, 0, 99, 20, 10, seq=5), _run(2, 0, 99, 20, 10, seq=5)
    delete, write = _run(3, 0, 99, 30, kind="tombstone"), _run(4, 0, 99, 40)
    runs = [a, b, delete, write]
    assert time_contiguous([b, delete, write], runs) == [delete, write]
    assert time_contiguous([a, b, delete, write], runs) == [a, b, delete, write]
    assert time_contiguous([b, write], [a, b, write]) == []  # one run left: no merge


def test_interleaved_runs_are_found_only_where_keys_and_times_both_overlap() -> None:
    sibling = _run(1, 0, 99, 20, 10, seq=5)
    retimed = _run(2, 0, 99, 12, seq=9, kind="tombstone")  # a merged tombstone re-timed into its span
    elsewhere = _run(3, 200, 299, 15, seq=7)  # same times, no shared key
    same_merge = _run(4, 0, 99, 10, seq=5, kind="tombstone")  # a merge's own tombstone at its oldest time
    state = TableState(SCHEMA, key_spaces={k.id: k for k in (sibling, retimed, elsewhere, same_merge)})
    assert [{a.id, b.id} for a, b in interleaved(state)] == [{"k1", "k2"}]


def test_check_reports_a_tombstone_retimed_below_a_run_it_hid(tmp_path: Any) -> None:
    """What the faulty merges stored (issue 29 item 4): the files are intact, but a merge's WAL
    entry re-timed its tombstone to the window's oldest time, inside the time span of a run the
    window left out, so the deleted key reads back. `check()` names the two runs."""
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))
    t = cat.create_table("k", [("key", pa.int64())])
    t.write({"key": [1, 2, 3], "v": [1, 2, 3]})
    t.write({"key": [1, 2, 3], "v": [4, 5, 6]})
    t.compact()  # one run spanning both writes' times
    t.delete([2])
    assert t.check().ok and _read(t) == {1: {"v": 4}, 3: {"v": 6}}
    state = t.log.state()
    tomb = next(k for k in state.key_spaces.values() if k.kind == "tombstone")
    run = next(k for k in state.key_spaces.values() if k.kind == "data")
    retimed = dataclasses.replace(tomb, id=new_id(), time=run.min_time)  # what the faulty merge wrote
    t.log.commit(Transaction("compact", (RemoveKeySpace(tomb.id), AddKeySpace(retimed)), "faulty merge (test)"))
    assert _read(t)[2] == {"v": 5}  # the deleted key is back: the stored decision is wrong
    report = t.check()
    assert not report.ok and any("interleave in commit time" in p.what for p in report.problems), str(report)
    cat.close()
