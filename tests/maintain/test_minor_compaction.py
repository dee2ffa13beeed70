"""Minor compaction: one merged key space, every fragment re-aligned through masks, no data
file rewritten; every read (all filtrations, time travel, `since` inside the window) unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.maintain.compaction.minor import minor_compact
from helpers import run_cli


def _table(tmp_path: Path) -> conch.Table:
    cat = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False))  # the runs are the test's
    return cat.create_table("t", [("id", pa.int64())])


def _rows(s: Any) -> list[dict[str, Any]]:
    return sorted(s.to_pylist(), key=lambda r: r["id"])


def _data_files(t: conch.Table) -> set[str]:
    return {f.path for f in t.state().fragments.values()}


def _reads(t: conch.Table, times: list[int]) -> list[Any]:
    out = [_rows(t.scan()), _rows(t.scan("a")), _rows(t.scan(where=t["b"] > 10)), _rows(t.scan(keys=[1, 5, 40, 999]))]
    out += [_rows(t.scan(asof=tm)) for tm in times]
    out += [_rows(t.scan(since=tm)) for tm in times]
    out.append(t.scan(limit=3).to_arrow().num_rows)
    return out


def test_realigns_without_rewriting_data(tmp_path: Path) -> None:
    t = _table(tmp_path)
    times = [t.write({"id": list(range(0, 60, 2)), "a": [f"a{i}" for i in range(30)], "b": list(range(30))}).time]
    times.append(t.write({"id": list(range(1, 60, 3)), "a": [f"x{i}" for i in range(20)], "b": list(range(20))}).time)
    times.append(t.write({"id": [1, 4, 7, 40], "b": [100, 101, 102, 103]}).time)  # partial-column upsert
    before = _reads(t, times)
    files_before = _data_files(t)
    r = minor_compact(t.log)
    assert r is not None and r.runs_in == 3 and r.commit.kind == "compact"
    state = t.state()
    (ks,) = [k for k in state.key_spaces.values() if k.kind == "data"]
    assert (ks.lsm, ks.time, ks.min_time) == (1, times[-1], times[0])
    assert all(f.mask and f.key_space == ks.id for f in state.fragments.values())
    assert _data_files(t) == files_before, "no data file written or dropped"
    assert _reads(t, times) == before
    assert t.check().ok
    assert r.map_bytes > 0 and any(h.kind == "compact" for h in t.history())
    # a later major compaction rewrites the masked layout densely, same answers
    t.compact()
    assert _reads(t, times) == before


def test_refuses_what_it_must_not_realign(tmp_path: Path) -> None:
    t = _table(tmp_path)
    assert minor_compact(t.log) is None  # nothing
    t.write({"id": [1, 2], "v": [1, 2]})
    assert minor_compact(t.log) is None  # one run
    t.write({"id": [2, 3], "v": [5, 6]})
    t.delete([1])
    assert minor_compact(t.log) is None  # tombstones hide by time: a major compaction's job


def test_a_concurrent_write_stays_newer(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.write({"id": [1, 2, 3], "v": [1, 1, 1]})
    t.write({"id": [2, 3, 4], "v": [2, 2, 2]})
    other = conch.connect(tmp_path / "wh", maintenance=conch.Policy(auto=False)).table("t")
    t.state()  # the compaction plans on this state...
    other.write({"id": [3], "v": [9]})  # ...and a blind write commits before it
    minor_compact(t.log)
    assert {r["id"]: r["v"] for r in t.scan().to_pylist()} == {1: 1, 2: 2, 3: 9, 4: 2}


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    writes=st.lists(
        st.tuples(
            st.lists(st.integers(0, 40), min_size=1, max_size=25, unique=True),
            st.sampled_from(["a", "b", "ab"]),
        ),
        min_size=2,
        max_size=6,
    ),
    runs=st.one_of(st.none(), st.integers(2, 6)),
)
def test_model_random_runs(tmp_path_factory: pytest.TempPathFactory, writes: list[Any], runs: int | None) -> None:
    t = _table(tmp_path_factory.mktemp("m"))
    times = [t.write({"id": [0], "a": ["first"], "b": [0]}).time]  # both columns exist (the reads name them)
    for n, (ids, cols) in enumerate(writes):
        data: dict[str, Any] = {"id": ids}
        if "a" in cols:
            data["a"] = [f"{n}-{i}" for i in ids]
        if "b" in cols:
            data["b"] = np.arange(len(ids), dtype=np.int64) + 10 * n
        times.append(t.write(data).time)
    before = _reads(t, times)
    minor_compact(t.log, runs=runs)
    assert _reads(t, times) == before


def test_cli_minor(tmp_path: Path) -> None:
    t = _table(tmp_path)
    t.write({"id": [1, 2, 3], "v": [1, 1, 1]})
    t.write({"id": [2, 5], "v": [2, 2]})
    before = _rows(t.scan())
    res = run_cli(tmp_path / "wh", "compact", "t", "--minor")
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "minor compaction: 2 runs → 1 (4 keys)" in out
    assert _rows(t.scan()) == before and len([k for k in t.state().key_spaces.values()]) == 1
