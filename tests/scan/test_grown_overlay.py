"""Overlays grown commit by commit (`conch.scan.overlay.grown`, `grown_values`): a table being
written gets one more small run per commit, and the first scan of each version builds its overlay
from the previous version's (kept in the key cache) instead of placing every small-run key again.
Scanned after every commit (so each version's overlay grows from the last), against a model of
fresh records and against a scan of a fresh connection (its own cache: every overlay from scratch)."""

from __future__ import annotations

from collections import Counter

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


@settings(deadline=None, max_examples=30, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=2, max_size=10))
def test_overlays_grown_per_commit_match_the_model_and_a_fresh_build(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, ops: list
) -> None:
    calls: Counter[str] = Counter()
    for module, name in ((overlay, "grown"), (stream, "grown_values")):
        real = getattr(module, name)
        monkeypatch.setattr(module, name, lambda *a, _f=real, _n=name, **k: (calls.update([_n]), _f(*a, **k))[1])
    path = tmp_path_factory.mktemp("w")
    t = conch.connect(path, maintenance=conch.Policy(auto=False)).create_table("t", [("id", pa.int64())])
    model: Model = {}
    _apply(t, model, "full", list(range(0, 500)), 0)
    t.compact()  # the large base the small runs overlay
    for seq, (kind, keys) in enumerate(ops, start=1):
        _apply(t, model, kind, keys, seq)
        fresh = conch.connect(path, maintenance=conch.Policy(auto=False)).table("t")
        for cols in (("a", "s"), ("a",), ("s",)):
            got = t.scan(*cols).to_arrow().to_pylist()
            assert got == _expected(model, cols), (seq, kind, cols)
            assert fresh.scan(*cols).to_arrow().to_pylist() == got
    kinds = [kind for kind, _ in ops]
    before_deletes = kinds[: kinds.index("delete")] if "delete" in kinds else kinds
    if len(before_deletes) >= 2:
        # a write right after a scanned write grows that version's overlay (after a delete the
        # deleted keys change what the overlay holds, and a key written again in part after its
        # delete sends a scan to the general path: no overlay to grow)
        assert calls["grown"] > 0, kinds
