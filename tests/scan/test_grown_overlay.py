"""Overlays grown commit by commit (`conch.scan.overlay.grown`, `grown_values`): a table being
written gets one more small run per commit, and the first scan of each version builds its overlay
from the previous version's (kept in the key cache) instead of placing every small-run key again.
Scanned after every commit (so each version's overlay grows from the last), against a model of
fresh records and against a scan of a fresh connection (its own cache: every overlay from scratch)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import conch
from conch.scan import overlay, stream

KEYS = range(0, 520)

op = st.one_of(
    st.tuples(st.just("full"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=60, unique=True)),
    st.tuples(st.just("a"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=40, unique=True)),
    st.tuples(st.just("s"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=30, unique=True)),
    st.tuples(st.just("delete"), st.lists(st.sampled_from(KEYS), min_size=1, max_size=30, unique=True)),
)
Model = dict[int, dict[str, object]]


def _apply(t: conch.Table, model: Model, kind: str, keys: list[int], seq: int) -> None:
    keys = sorted(keys)
    ids = pa.array(keys, pa.int64())
    if kind == "delete":
        t.delete(pa.table({"id": ids}))
        for k in keys:
            model.pop(k, None)
        return
    cols: dict[str, list[object]] = {}
    if kind in ("full", "a"):
        cols["a"] = [float(k * 7 + seq) for k in keys]
    if kind in ("full", "s"):  # strings, and some nulls: the splice's general path
        cols["s"] = [None if (k + seq) % 5 == 0 else f"v{k}-{seq}" for k in keys]
    t.write(
        pa.table({"id": ids, **{c: pa.array(v, pa.float64() if c == "a" else pa.string()) for c, v in cols.items()}})
    )
    for i, k in enumerate(keys):
        row = model.get(k, {"a": None, "s": None})  # a record written after its delete: others null
        model[k] = {**row, **{c: v[i] for c, v in cols.items()}}


def _expected(model: Model, cols: tuple[str, ...]) -> list[dict[str, object]]:
    return [{"id": k, **{c: model[k][c] for c in cols}} for k in sorted(model)]


def _scan_after_each(path: object, t: conch.Table, model: Model, ops: list, read: list[bool] | None = None) -> None:
    """Apply `ops`, scanning after each one `read` marks (default all; the last always): a reader
    that skips versions grows the last one it read by several runs at once."""
    for seq, (kind, keys) in enumerate(ops, start=1):
        _apply(t, model, kind, keys, seq)
        if read is not None and seq < len(ops) and not read[seq - 1]:
            continue
        fresh = conch.connect(path, maintenance=conch.Policy(auto=False)).table("t")
        for cols in (("a", "s"), ("a",), ("s",)):
            got = t.scan(*cols).to_arrow().to_pylist()
            assert got == _expected(model, cols), (seq, kind, cols)
            assert fresh.scan(*cols).to_arrow().to_pylist() == got


def _based(path: object) -> tuple[conch.Table, Model]:
    t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    model: Model = {}
    _apply(t, model, "full", list(range(0, 500)), 0)
    t.compact()  # the large base the small runs overlay
    return t, model


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=2, max_size=10), read=st.lists(st.booleans(), min_size=10, max_size=10))
def test_overlays_grown_per_commit_match_the_model_and_a_fresh_build(
    tmp_path_factory: pytest.TempPathFactory, ops: list, read: list[bool]
) -> None:
    path = tmp_path_factory.mktemp("w")
    t, model = _based(path)
    _scan_after_each(path, t, model, ops, read)


def test_each_commit_grows_the_last_versions_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upserts among the base's keys, each version scanned: every overlay after the first grows
    from the last one (keys and each unit's cells), and reads the same as a fresh build."""
    calls: Counter[str] = Counter()
    for module, name in ((overlay, "grown"), (stream, "grown_values"), (overlay, "overlay_keys")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=real, _n=name, **k: (calls.update([_n]), _f(*a, **k))[1])
    t, model = _based(tmp_path)
    ops = [("full", [3, 40, 41, 250]), ("a", [4, 40, 499]), ("s", [5, 41]), ("full", [7, 8, 9]), ("a", [0, 250])]
    _scan_after_each(tmp_path, t, model, ops)
    # from scratch: the live table's first overlay and each fresh connection's; grown: every
    # later version of the live table
    assert calls["grown"] == len(ops) - 1
    assert calls["overlay_keys"] == 1 + len(ops)
    assert calls["grown_values"] >= len(ops) - 1
    # a reader that skips versions: the last version it read grows by the runs since, at once
    calls.clear()
    more = [("a", [10, 11]), ("full", [12, 40]), ("s", [13]), ("a", [14, 499])]
    _scan_after_each(tmp_path, t, model, more, read=[False, False, True, True])
    assert calls["grown"] == 2  # after the third (three runs at once) and the fourth
    assert calls["overlay_keys"] == 2  # the fresh connections'


def test_a_grown_overlay_takes_the_place_of_the_one_it_grew_from(tmp_path: Path) -> None:
    """The key cache keeps one version's overlay and cells, not each version's: the one a new
    version grew from is forgotten (kept beside it, the two filled the default cache at 1M
    overlay keys, and each version evicted what the next grows from). A reader of the older
    version builds it again and reads the same."""
    t, model = _based(tmp_path)
    cache = t.log.warehouse.key_cache
    versions = []
    for seq, keys in enumerate([[3, 40, 41, 250], [4, 40, 499], [5, 41], [6, 250]], start=1):
        _apply(t, model, "full", keys, seq)
        assert t.scan().to_pylist() == _expected(model, ("a", "s"))
        kept = [v for k, v in cache._lru._items.items() if k[0] == "derived"]
        assert sum(isinstance(v, overlay.OverlayKeys) for v in kept) == 1
        assert sum(isinstance(v, overlay.OverlayCells) for v in kept) == 1  # one unit: a and s
        versions.append((t.state().seq, _expected(model, ("a", "s"))))
    for seq, want in versions:
        assert t.snapshot(version=seq).scan().to_pylist() == want


def test_a_grown_overlay_is_the_overlay_built_from_scratch() -> None:
    """`grown` gives `overlay_keys`' fields exactly, added keys before, among and after the old."""
    rng = np.random.default_rng(5)
    base = np.sort(rng.choice(10_000, 3_000, replace=False)).astype(np.uint64)
    runs = [np.sort(rng.choice(12_000, n, replace=False)).astype(np.uint64) for n in (40, 300, 7, 900)]
    rows = [np.arange(len(r), dtype=np.int64) for r in runs]
    make = lambda u: pa.table({"k": pa.array(u)})  # noqa: E731
    for start, step in ((1, 1), (1, 2), (2, 2)):  # one run at a time, and several at once
        ov = overlay.overlay_keys(base, runs[:start], rows[:start], make)
        for i in range(start, len(runs), step):
            ov = overlay.grown(ov, base, runs[i : i + step], rows[i : i + step], make)
            want = overlay.overlay_keys(base, runs[: i + step], rows[: i + step], make)
            assert ov.keys.equals(want.keys) and len(ov.pos) == len(want.pos)
            assert np.array_equal(ov.ins, want.ins) and np.array_equal(ov.hit, want.hit)
            assert all(np.array_equal(a, b) for a, b in zip(ov.pos, want.pos, strict=True))


def test_a_delete_shrinks_the_last_versions_overlay(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Upserts and deletes interleaved (the lsm_shapes deletes family), each version scanned: the
    overlay after a delete is the last one less the keys the delete removes (`grown`'s `gone`),
    not built from scratch, and reads the same as a fresh build; so is one after a write that
    writes a deleted key again, and one a reader reaches over a write and a delete at once."""
    calls: Counter[str] = Counter()
    for module, name in ((overlay, "grown"), (overlay, "overlay_keys")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=real, _n=name, **k: (calls.update([_n]), _f(*a, **k))[1])
    t, model = _based(tmp_path)
    ops = [
        ("full", [3, 40, 41, 250, 505]),
        ("delete", [40, 250, 7, 505]),  # keys of the small run (one inserted), and base keys
        ("a", [4, 41, 499]),
        ("delete", [4, 3, 12]),
        ("full", [40, 12, 510]),  # deleted keys written again, whole
        ("delete", [510, 41]),
    ]
    _scan_after_each(tmp_path, t, model, ops)
    assert calls["grown"] == len(ops) - 1
    assert calls["overlay_keys"] == 1 + len(ops)  # the first version's, and the fresh connections'
    calls.clear()
    more = [("full", [20, 21, 4]), ("delete", [20, 3, 499]), ("full", [22]), ("delete", [22, 21])]
    _scan_after_each(tmp_path, t, model, more, read=[False, True, False, True])
    assert calls["grown"] == 2  # a write and a delete at once, twice
    assert calls["overlay_keys"] == 2


def test_a_grown_overlay_less_gone_keys_is_the_overlay_built_from_scratch() -> None:
    """`grown` with `gone` gives `overlay_keys`' fields over the runs less those keys (each run's
    selected rows without them), and `moved` maps every kept key to its new place."""
    rng = np.random.default_rng(8)
    base = np.sort(rng.choice(10_000, 3_000, replace=False)).astype(np.uint64)
    runs = [np.sort(rng.choice(12_000, n, replace=False)).astype(np.uint64) for n in (400, 30, 900)]
    rows = [np.arange(len(r), dtype=np.int64) for r in runs]
    make = lambda u: pa.table({"k": pa.array(u)})  # noqa: E731
    prev = overlay.overlay_keys(base, runs[:2], rows[:2], make)
    gone = np.sort(rng.choice(prev.numbers, 120, replace=False))
    gone = gone[~np.isin(gone, runs[2])]  # a key the newest run holds is not gone
    for new in ([], [2]):
        ov = overlay.grown(prev, base, [runs[i] for i in new], [rows[i] for i in new], make, gone)
        less = [(r[~np.isin(r, gone)], w[~np.isin(r, gone)]) for r, w in zip(runs, rows, strict=True)]
        want = overlay.overlay_keys(base, [less[i][0] for i in [0, 1, *new]], [less[i][1] for i in [0, 1, *new]], make)
        assert ov.keys.equals(want.keys) and np.array_equal(ov.ins, want.ins) and np.array_equal(ov.hit, want.hit)
        assert all(np.array_equal(a, b) for a, b in zip(ov.pos, want.pos, strict=True))
        assert all(np.array_equal(a, b) for a, b in zip(ov.rows, [less[i][1] for i in [0, 1, *new]], strict=True))
        assert ov.moved is not None
        kept = ov.moved >= 0
        assert np.array_equal(kept, ~np.isin(prev.numbers, gone))
        assert np.array_equal(ov.numbers[ov.moved[kept]], prev.numbers[kept])
