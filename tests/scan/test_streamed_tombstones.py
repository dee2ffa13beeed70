"""Tombstones on the streamed path (`conch.scan.segments.deleted_keys`): deleted keys are left out of
the base's rows and the small runs' keys; a key written again after its delete streams when the
newer run holds every column read, and goes to the general path when it holds only some. Checked
against a model of fresh records and against the general path (`fast_paths=False`)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch

KEYS = range(0, 500)
COLUMNS = ("a", "b")

op = st.one_of(
    st.tuples(st.just("full"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=80, unique=True)),
    st.tuples(st.just("a"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=40, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=60, unique=True)),
)


def _apply(t: conch.Table, model: dict[int, dict[str, int | None]], kind: str, keys: list[int], seq: int) -> None:
    keys = sorted(keys)
    if kind == "delete":
        t.delete(pa.table({"id": pa.array(keys, pa.int64())}))
        for k in keys:
            model.pop(k, None)
        return
    a = [k * 7 + seq for k in keys]
    if kind == "full":
        b = [k - seq for k in keys]
        t.write(pa.table({"id": pa.array(keys, pa.int64()), "a": a, "b": b}))
        for k, x, y in zip(keys, a, b, strict=True):
            model[k] = {"a": x, "b": y}
        return
    t.write(pa.table({"id": pa.array(keys, pa.int64()), "a": a}))
    for k, x in zip(keys, a, strict=True):
        model[k] = {**model.get(k, {"b": None}), "a": x}  # a record written after its delete: b is null


def _expected(model: dict[int, dict[str, int | None]], cols: tuple[str, ...], where: str | None) -> list[dict]:
    out = []
    for k in sorted(model):
        r = model[k]
        if where == "a_small" and not (r["a"] is not None and r["a"] < 1500):
            continue
        out.append({"id": k, **{c: r.get(c) for c in cols}})
    return out


@settings(deadline=None, max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=8), chunk=st.sampled_from([16, 1000]), data=st.data())
def test_streamed_scans_with_tombstones_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list, chunk: int, data: st.DataObject
) -> None:
    path = tmp_path_factory.mktemp("w")
    cat = conch.connect(path, write_options=conch.WriteOptions(chunk_rows=chunk), maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    model: dict[int, dict[str, int | None]] = {}
    _apply(t, model, "full", list(range(0, 400)), 0)  # the large base run the small runs overlay
    for seq, (kind, keys) in enumerate(ops, start=1):
        _apply(t, model, kind, keys, seq)
    for _ in range(4):
        cols = data.draw(st.sampled_from([(), ("a",), ("b",), ("a", "b")]))
        where = data.draw(st.sampled_from([None, "a_small"]))
        filt = (t["a"] < 1500) if where else None
        scan = t.scan(*cols, where=filt)
        got = scan.to_arrow()
        slow = t.scan(*cols, where=filt).with_options(fast_paths=False).to_arrow()
        want = _expected(model, cols or COLUMNS, where)
        assert got.to_pylist() == want, (cols, where)
        assert slow.to_pylist() == want
        lo = data.draw(st.integers(0, 450))
        ranged = t.scan(*cols, keys=conch.KeyRange((lo,), (lo + 60,))).to_arrow().to_pylist()
        assert ranged == [r for r in _expected(model, cols or COLUMNS, None) if lo <= r["id"] < lo + 60]
        some = sorted(data.draw(st.lists(st.sampled_from(KEYS), min_size=1, max_size=30, unique=True)))
        taken = t.scan(*cols, keys=some).to_arrow().to_pylist()
        assert taken == [r for r in _expected(model, cols or COLUMNS, None) if r["id"] in set(some)]


def test_deletes_then_full_rewrites_stream(tmp_path: Path) -> None:
    """The lsm_shapes deletes family in small: deletes interleaved with full-row upserts of
    random keys, some of them deleted before: the scan streams (it used to take the general
    path, ~40x a clean read at 1M keys) and returns the model's records."""
    cat = conch.connect(tmp_path, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    model: dict[int, dict[str, int | None]] = {}
    _apply(t, model, "full", list(range(0, 400)), 0)
    for seq in range(1, 9):
        keys = list(range(seq * 3, 400, 17))
        _apply(t, model, "delete" if seq % 2 else "full", keys, seq)
    scan = t.scan()
    assert scan.to_arrow().to_pylist() == _expected(model, COLUMNS, None)
    assert scan.metrics().merge == "zip (streamed)"
    assert scan.metrics().tombstones == 4
    _apply(t, model, "a", [3 * 3], 9)  # key 9, deleted at seq 3, written again in part
    scan = t.scan()
    assert scan.to_arrow().to_pylist() == _expected(model, COLUMNS, None)
    assert scan.metrics().merge != "zip (streamed)"  # b of key 9 must read null: the general path
    only_a = t.scan("a")
    assert only_a.to_arrow().to_pylist() == _expected(model, ("a",), None)
    assert only_a.metrics().merge == "zip (streamed)"  # the partial run holds every column read


@settings(deadline=None, max_examples=25, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=2, max_size=10), data=st.data())
def test_deleted_keys_kept_across_versions_match_the_model(
    tmp_path_factory: pytest.TempPathFactory, ops: list, data: st.DataObject
) -> None:
    """A scan after every commit: each version's deleted keys and rows are kept in the key cache,
    and which deleted keys a newer run holds again is kept per (tombstone, run) and reused by the
    next version (`deleted_keys`). Every scan must equal the model, and a fresh connection's
    (nothing kept) must too."""
    path = tmp_path_factory.mktemp("w")
    cat = conch.connect(path, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    model: dict[int, dict[str, int | None]] = {}
    _apply(t, model, "full", list(range(0, 400)), 0)
    for seq, (kind, keys) in enumerate(ops, start=1):
        _apply(t, model, kind, keys, seq)
        cols = data.draw(st.sampled_from([(), ("a",), ("a", "b")]))
        want = _expected(model, cols or COLUMNS, None)
        assert t.scan(*cols).to_arrow().to_pylist() == want, (seq, cols)
    fresh = conch.connect(path, maintenance=conch.Policy(auto=False)).table("t")
    for cols in [(), ("a",), ("b",)]:
        assert fresh.scan(*cols).to_arrow().to_pylist() == _expected(model, cols or COLUMNS, None)
        assert t.scan(*cols).to_arrow().to_pylist() == _expected(model, cols or COLUMNS, None)
