"""L0 counted in sorted runs, and a large component's stop trigger (issue 30, `plan.sorted_runs`,
`Policy.l0_stop`): the plans on hand-made states, then real histories of upserts and of upserts
and deletes interleaved, checked against a dict model after every commit, with the rewrites they
triggered counted."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

import conch
from conch.files.manifest import KeySpace
from conch.maintain.compaction.plan import is_l1, plan, sorted_runs
from conch.model.keys import encode_keys

LARGE = conch.Policy(small_bytes=0, l0_trigger=4, l0_stop=8)  # no component is small


def ks(i: int, time: int, rows: int = 10, lsm: int = 0, kind: str = "data", seq: int | None = None) -> KeySpace:
    lo, hi = (encode_keys([pa.array([k], pa.uint64())])[0].as_py().hex() for k in (0, 1000))
    return KeySpace(f"k{i}", "", f"p{i}", rows, lo, hi, kind, time, i if seq is None else seq, lsm, bytes=rows * 10)


def _base() -> dict[str, KeySpace]:
    return {"k0": ks(0, 1, rows=100_000, lsm=1)}


def test_a_large_component_waits_for_its_stop_trigger_then_merges_the_newer_runs() -> None:
    runs = _base()
    runs["k1"] = ks(1, 10, rows=300)  # what an earlier merge left: more rows than the newer runs together
    for i in range(2, 8):
        runs[f"k{i}"] = ks(i, 10 + i)
    assert plan(runs, {}, LARGE).tasks == ()  # 7 sorted runs < l0_stop: a scan pays for L0 mostly once
    runs["k8"] = ks(8, 30)
    (task,) = plan(runs, {}, LARGE).tasks
    assert task.kind == "merge" and set(task.inputs) == {f"k{i}" for i in range(2, 9)}  # not the 300-row run
    assert (task.min_time, task.max_time) == (12, 30)


def test_the_major_still_comes_at_l1_ratio_before_the_stop_trigger() -> None:
    runs = _base() | {f"k{i}": ks(i, 10 + i, rows=2_500) for i in range(1, 5)}  # 10k rows = 0.1 x L1
    (task,) = plan(runs, {}, LARGE).tasks
    assert task.kind == "major" and len(task.inputs) == 5


def test_a_merge_output_of_data_and_tombstones_counts_as_one_sorted_run() -> None:
    runs = _base()
    runs["k1"] = ks(1, 10, seq=100)  # one merge's outputs: a data run and a tombstone run, one commit
    runs["k2"] = ks(2, 8, kind="tombstone", seq=100)
    runs["k3"] = ks(3, 11)
    runs["k4"] = ks(4, 12, kind="tombstone")
    assert [len(g) for g in sorted_runs([runs[k] for k in ("k2", "k1", "k3", "k4")])] == [2, 1, 1]
    # 4 files but 3 sorted runs: below l0_trigger (counted in files, every commit merged the newest
    # two files and wrote two again). Tombstones keep a component at l0_trigger, not l0_stop
    assert plan(runs, {}, LARGE).tasks == ()
    runs["k5"] = ks(5, 13)
    (task,) = plan(runs, {}, LARGE).tasks
    assert task.kind == "merge" and {"k3", "k4", "k5"} <= set(task.inputs)
    assert {"k1", "k2"} <= set(task.inputs) or not {"k1", "k2"} & set(task.inputs)  # a sorted run whole


def _history(tmp_path: Path, deletes: bool, commits: int = 48) -> tuple[int, int]:
    """Upserts of random keys over a 4,000-key base (and deletes every other commit): reads equal
    the model after every commit; returns (rewrites, most L0 sorted runs left by a commit)."""
    policy = conch.Policy(small_rows=1_000, move_rows=1_000, l0_stop=6, settle_after=None)
    t = conch.connect(str(tmp_path), maintenance=policy).create_table("t", [("id", pa.uint64())])
    rng = np.random.default_rng(3)
    n = 4_000
    model = {k: float(k) for k in range(n)}
    t.write(pa.table({"id": pa.array(np.arange(n), pa.uint64()), "v": pa.array(np.arange(n, dtype=np.float64))}))
    most = 0
    for c in range(commits):
        keys = np.sort(rng.choice(n, 30, replace=False))
        if deletes and c % 2:
            t.delete(pa.table({"id": pa.array(keys[:15], pa.uint64())}))
            for k in keys[:15]:
                model.pop(int(k), None)
        else:
            vals = rng.random(len(keys))
            t.write(pa.table({"id": pa.array(keys, pa.uint64()), "v": pa.array(vals)}))
            model.update(zip(map(int, keys), map(float, vals), strict=True))
        got = t.scan().to_arrow().sort_by("id")
        assert dict(zip(got["id"].to_pylist(), got["v"].to_pylist(), strict=True)) == model
        most = max(most, len(sorted_runs([k for k in t.state().key_spaces.values() if not is_l1(k)])))
    rewrites = sum(1 for h in t.history() if h.kind == "compact" and not h.summary.startswith("move"))
    return rewrites, most


def test_random_upserts_merge_at_the_stop_trigger_only(tmp_path: Path) -> None:
    rewrites, most = _history(tmp_path, deletes=False)
    # 48 commits of 30 keys: L0 reaches 0.1 x L1 (400 rows) every ~14 commits (a major), and between
    # majors merges at 6 sorted runs. At l0_trigger (the old rule) this history rewrote ~20 times.
    assert rewrites <= 12 and most < 6


def test_interleaved_deletes_do_not_merge_at_every_commit(tmp_path: Path) -> None:
    rewrites, most = _history(tmp_path, deletes=True)
    # counted in files, a merge of data and tombstones wrote two runs and L0 never fell below
    # l0_trigger: a merge at almost every commit (79 in 100 at 500k keys)
    assert rewrites <= 24 and most < 4
