"""`Table.enrich`: derived columns by key, incremental, resumable, without rewriting other groups."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import conch
from conch.files.storage import LocalStorage
from conch.log.metastore.objectstore import ObjectStoreMetastore
from services import Postgres


def features(batch: pa.RecordBatch) -> dict[str, Any]:
    """A module-level fn (picklable): two derived columns from `x` and `g.s`."""
    return {
        "x2": pc.multiply(batch.column("x"), 2.0),
        "slen": pc.utf8_length(batch.column("g").field("s")),
    }


def _table(cat: conch.Catalog, n: int = 500) -> conch.Table:
    t = cat.create_table("t", [("id", pa.int64())])
    t.write(
        {
            "id": list(range(n)),
            "x": [i / 4 if i % 9 else None for i in range(n)],
            "g": [{"s": "ab" * (i % 5)} for i in range(n)],
        }
    )
    t.write({"id": list(range(0, n, 7)), "x": [-1.0] * len(range(0, n, 7))})  # a second run: fresh cells win
    return t


def _expected(t: conch.Table) -> list[tuple[Any, ...]]:
    """The function computed over pandas (nulls as None)."""
    df = t.scan("x", "g.s").to_pandas()
    df["x2"] = df["x"] * 2.0
    df["slen"] = df["g"].map(lambda g: None if g["s"] is None else len(g["s"]))
    return _rows(df["id"], df["x2"], df["slen"])


def _got(t: conch.Table) -> list[tuple[Any, ...]]:
    df = t.scan("f").to_pandas()
    return _rows(df["id"], df["f"].map(lambda f: f["x2"]), df["f"].map(lambda f: f["slen"]))


def _rows(*cols: Any) -> list[tuple[Any, ...]]:
    def norm(v: Any) -> Any:
        return None if v is None or (isinstance(v, float) and v != v) else v

    return [tuple(norm(v) for v in r) for r in zip(*(c.tolist() for c in cols), strict=True)]


def test_enrich_equals_pandas_and_leaves_other_groups_alone(tmp_path: Path) -> None:
    # automatic compaction off: this test checks that enrich itself removes and rewrites nothing
    # (a compaction after its commits would rewrite every group, by design)
    t = _table(conch.connect(tmp_path, maintenance=conch.Policy(auto=False)))
    before = set(t.state().fragments)
    res = t.enrich(features, inputs=["x", "g.s"], into="f", range_rows=128, workers=0)
    assert res.keys == 500 and res.ranges == 4 and res.rows_written == 500
    assert _got(t) == _expected(t)
    after = t.state().fragments
    assert before <= set(after)  # nothing removed or rewritten
    assert {after[f].group for f in set(after) - before} == {"f"}


def test_incremental_runs_write_only_changed_keys(tmp_path: Path) -> None:
    # no settle: one landing after the first run would be the newest commit the test compares with
    t = _table(conch.connect(tmp_path, maintenance=conch.Policy(settle_after=None)), 200)
    t.enrich(features, inputs=["x", "g.s"], into="f", workers=0)
    seq = t.history()[-1].seq
    again = t.enrich(features, inputs=["x", "g.s"], into="f", workers=0)
    assert again.keys == 0 and not again.wrote and t.history()[-1].seq == seq  # nothing written at all
    t.write({"id": [3, 500], "x": [100.0, 1.0]})  # a changed input and a new key
    t.delete([4])
    inc = t.enrich(features, inputs=["x", "g.s"], into="f", workers=0)
    assert inc.keys == 2 and inc.rows_written == 2
    assert _got(t) == _expected(t)
    assert not t.enrich(features, inputs=["x", "g.s"], into="f", workers=0).wrote
    full = t.enrich(features, inputs=["x", "g.s"], into="f", workers=0, full=True)
    assert full.keys == 200 and full.rows_written == 200  # 200 - key 4 + key 500


def test_where_limits_the_keys_and_a_process_pool_gives_the_same_result(catalog: conch.Catalog) -> None:
    t = _table(catalog, 300)
    res = t.enrich(features, inputs=["x", "g.s"], into="f", where=t["x"] > 10, range_rows=64, workers=2)
    exp = [r for r in _expected(t) if r[1] is not None and r[1] > 20]
    got = [r for r in _got(t) if r[1] is not None]
    assert res.rows_written == len(exp) and got == exp


@pytest.mark.parametrize("workers", [0, 2])
def test_a_postgresql_warehouse_is_enriched_in_its_own_metastore(
    tmp_path: Path, postgres: Postgres, workers: int
) -> None:
    """Ranges (in this process or in a pool) reach the table as `connect()` did: through the
    PostgreSQL metastore, not a default one beside the data."""
    cat = conch.connect(tmp_path / "wh", metastore=postgres.dsn())
    t = _table(cat, 300)
    res = t.enrich(features, inputs=["x", "g.s"], into="f", range_rows=64, workers=workers)
    assert res.rows_written == 300 and _got(t) == _expected(t)
    assert not (tmp_path / "wh" / "_catalog.sqlite").exists()


def test_a_metastore_object_enriches_in_process_and_refuses_a_pool(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path)
    t = _table(conch.connect(tmp_path, metastore=ObjectStoreMetastore(storage)), 200)
    with pytest.raises(conch.EnrichError, match="reopen"):
        t.enrich(features, inputs=["x", "g.s"], into="f", range_rows=64, workers=2)
    assert t.enrich(features, inputs=["x", "g.s"], into="f", range_rows=64).rows_written == 200
    assert _got(t) == _expected(t)


def test_bad_fn_output_is_a_typed_error_and_commits_nothing(catalog: conch.Catalog) -> None:
    t = _table(catalog, 50)
    seq = t.history()[-1].seq
    with pytest.raises(conch.ConchError, match="one output row per input row"):
        t.enrich(lambda b: {"y": pa.array([1])}, inputs=["x"], into="f", workers=0)
    with pytest.raises(conch.ConchError, match="into"):
        t.enrich(features, inputs=["x"], into="", workers=0)
    with pytest.raises(conch.ColumnNotFoundError):
        t.enrich(features, inputs=["nope"], into="f", workers=0)
    assert t.history()[-1].seq == seq


SLOW_RUN = """
import sys, time, conch, pyarrow.compute as pc
sys.path[:0] = [{tests!r}, {shared!r}]  # this test's folder, and tests/ for its shared fixtures
from test_enrich import features

def slow(batch):
    print("batch", flush=True)
    time.sleep(0.4)
    return features(batch)

t = conch.connect({wh!r}).table("t")
res = t.enrich(slow, inputs=["x", "g.s"], into="f", range_rows=50, batch_rows=50, workers=0)
print("done", res.ranges, res.ranges_skipped, flush=True)
"""


def test_a_killed_run_resumes_without_redoing_finished_ranges(tmp_path: Path) -> None:
    wh = tmp_path / "wh"
    t = _table(conch.connect(wh), 400)  # 8 ranges of 50 keys
    here = os.path.dirname(__file__)
    script = SLOW_RUN.format(tests=here, shared=os.path.dirname(here), wh=str(wh))
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = [c for c in t.history() if c.kind == "enrich"]
        if len(done) >= 3:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first = [c for c in t.history() if c.kind == "enrich"]
    assert 3 <= len(first) < 8, "the run was killed mid-way"
    res = t.enrich(features, inputs=["x", "g.s"], into="f", range_rows=50, workers=0)
    assert res.ranges == 8 and res.ranges_skipped == len(first)  # finished ranges were not redone
    ranges = [c.summary for c in t.history() if c.kind == "enrich" and '"i": ' in c.summary]
    assert len(ranges) == 8 == len(set(ranges))  # each range committed exactly once
    assert _got(t) == _expected(t)
    assert not t.enrich(features, inputs=["x", "g.s"], into="f", workers=0).wrote
