"""Reads of an LSM tree being written (issue 30): one large run, many disjoint appends after it
(some 1/64 to 1/8 of its size, absorbed as small runs of the large one: `scan/segments.py`;
tinier ones stay segments of their own), partial upserts of random keys on top. Over random
histories, every full scan, filter and take (at the newest version and at every earlier one)
must equal a naive model's fresh records and the general path, whether small runs are kept
decoded across scans (`ScanContext.small`) or not. Where the tree allows it, the streamed path
is taken with the absorbed runs in the large run's segment, and a repeated scan of fixed-width
columns (a filter too) opens no fragment."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import conch

BASE = 640  # keys 0, 2, ..., 1278: the large run; appends go past it
APPEND = st.sampled_from([3, 10, 16, 40, 80, 100])  # absorbed where 10 <= rows <= 80 (and room is left)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), APPEND, st.integers(0, 9)),
        st.tuples(st.sampled_from(["a", "a", "b", "g", "ab"]), st.integers(1, 40), st.integers(0, 1000)),
    ),
    min_size=1,
    max_size=8,
)
FIXED = ("a", "b", "g.x")  # fixed-width columns (`s` is a string)


def _a(k: int, seed: int) -> float | None:
    return None if (k + seed) % 11 == 0 else (k * 7 + seed) % 100 / 100


def _row(rec: dict[str, Any], k: int, cols: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {"id": k}
    for c in cols:
        if c == "g.x":
            out.setdefault("g", {})["x"] = rec.get("g.x")
        else:
            out[c] = rec.get(c)
    return out


def _expected(
    records: dict[int, dict[str, Any]], cols: tuple[str, ...], below: float | None = None
) -> list[dict[str, Any]]:
    def passes(r: dict[str, Any]) -> bool:
        a = r.get("a")
        return below is None or (a is not None and not math.isnan(a) and a < below)

    return [_row(records[k], k, cols) for k in sorted(records) if passes(records[k])]


@settings(max_examples=30, deadline=None)
@given(ops=OPS, hot=st.booleans(), data=st.data())
def test_many_disjoint_runs_and_overlays(ops: list[tuple[str, int, int]], hot: bool, data: Any) -> None:
    """Appends (disjoint runs of several sizes), partial upserts of `a`, `b`, another group `g`
    (with inserts of keys no run holds, inside the large run's span), each followed by a full scan, a filter on `a` and a take
    with a random projection, checked against the model and the general path; then every earlier
    version. Absorbed appends leave fewer segments than disjoint runs."""
    with tempfile.TemporaryDirectory() as d:
        cat = conch.connect(
            Path(d) / "w", write_options=conch.WriteOptions(chunk_rows=64), maintenance=conch.Policy(auto=False)
        )
        if not hot:
            cat.warehouse.format.hot.max_bytes = 0  # nothing kept decoded: Vortex reads
        t = cat.create_table("t", [("id", pa.int64())])
        model: dict[int, dict[str, Any]] = {}
        versions: list[tuple[int, dict[int, dict[str, Any]]]] = []

        def write(cols: dict[str, Any]) -> None:
            keys = cols["id"]
            for name, vals in cols.items():
                if name == "id":
                    continue
                flat = vals.field("x").to_pylist() if name == "g" else vals
                for k, v in zip(keys, flat, strict=True):
                    model.setdefault(k, {})["g.x" if name == "g" else name] = v
            versions.append((t.write(pa.table(cols)).seq, {k: dict(v) for k, v in model.items()}))

        def full_rows(keys: list[int], seed: int) -> dict[str, Any]:
            return {
                "id": keys,
                "a": [_a(k, seed) for k in keys],
                "b": [k % 9 - seed for k in keys],
                "s": ["s" * (k % 4) for k in keys],
                "g": pa.StructArray.from_arrays([pa.array([k / 4 for k in keys])], ["x"]),
            }

        write(full_rows(list(range(0, 2 * BASE, 2)), 1))
        end = 2 * BASE
        runs = [BASE]  # rows of each disjoint run written so far
        for kind, n, seed in ops:
            if kind == "append":
                write(full_rows(list(range(end, end + n)), seed))
                end += n
                runs.append(n)
            else:  # a partial upsert of random keys in the large run's span: held ones, new (odd) ones
                keys = sorted(set(data.draw(st.lists(st.integers(0, 2 * BASE - 2), min_size=n, max_size=n))))
                cols: dict[str, Any] = {"id": keys}
                if "a" in kind:
                    cols["a"] = [_a(k, seed) for k in keys]
                if "b" in kind:
                    cols["b"] = [k % 5 + seed for k in keys]
                if kind == "g":
                    cols["g"] = pa.StructArray.from_arrays([pa.array([k + seed / 8 for k in keys])], ["x"])
                write(cols)
            proj = tuple(c for c in ("a", "b", "s", "g.x") if data.draw(st.booleans())) or ("a", "b", "s", "g.x")
            scan = t.scan(*proj)
            got = scan.to_pylist()
            assert got == _expected(model, proj), (kind, proj)
            assert got == scan.with_options(fast_paths=False).to_pylist(), (kind, proj)
            absorbable = sum(1 for r in runs[1:] if r * 8 <= BASE <= r * 64)
            if scan.metrics().merge == "zip (streamed)":  # upserts overlap the large run: never bases
                assert scan.metrics().segments == len(runs) - absorbable, (runs, scan.metrics().segments)
            x = data.draw(st.sampled_from([0.05, 0.3, 0.7]))
            filt = t.scan(*proj, where=t["a"] < x)
            got = filt.to_pylist()
            assert got == _expected(model, proj, x), (kind, proj, x)
            assert got == filt.with_options(fast_paths=False).to_pylist(), (kind, proj, x)
            # without keys (DuckDB's scan): the same rows, and a run read from the hot cache is filtered too
            bare = filt.with_options(with_keys=False).to_pylist()
            assert bare == [{k: v for k, v in r.items() if k != "id"} for r in got], (kind, proj, x)
            want = data.draw(st.lists(st.integers(-3, end + 3), min_size=1, max_size=50), label="take")
            limit = data.draw(st.sampled_from([None, None, 5]))
            take = t.scan(*proj, keys=want, limit=limit)
            expect = [_row(model[k], k, proj) for k in sorted(set(want) & set(model))]
            got = take.to_pylist()
            assert got == expect[:limit], (want, proj, limit)
            assert got == take.with_options(fast_paths=False).to_pylist(), (want, proj, limit)
        if hot:  # small runs kept decoded: a repeated scan of fixed-width columns opens no fragment
            t.scan(*FIXED).to_arrow()
            again = t.scan(*FIXED)
            assert again.to_pylist() == _expected(model, FIXED)
            assert again.metrics().fragments_read == 0, again.metrics().render()
            # and a filter: the tiny runs left segments of their own are filtered in Arrow over
            # their kept-decoded cells (`Stream._passing`), no Vortex scan opened per run
            t.scan("a", "b", where=t["a"] < 0.3).to_arrow()
            filt = t.scan("a", "b", where=t["a"] < 0.3)
            assert filt.to_pylist() == _expected(model, ("a", "b"), 0.3)
            m = filt.metrics()
            if m.merge == "zip (streamed)":
                assert m.segments == len(runs) - absorbable, (runs, m.render())
                assert m.fragments_read == 0, m.render()
        for seq, records in versions:  # time travel: every earlier version, full and filtered
            assert t.scan("a", "b", "g.x", version=seq).to_pylist() == _expected(records, ("a", "b", "g.x")), seq
            got = t.scan("a", "s", where=t["a"] < 0.5, version=seq).to_pylist()
            assert got == _expected(records, ("a", "s"), 0.5), seq
        cat.close()


def test_l1_runs_are_the_bases_when_a_spread_l0_run_holds_more_keys_than_each(tmp_path: Path) -> None:
    """Five disjoint L1 runs of 20k keys under an L0 run of 30k keys spread over all of them (the
    ingest family at 5M keys: 160k-key L1 runs under merged upsert runs of ~300k). Chosen largest
    first, the L0 run was the one base and every L1 run an overlay, more bytes than a scan decodes
    whole under a 16 MiB budget, so each scan took the general merge (40x a settled table at 5M);
    the L1 runs hold more keys as bases, and the L0 run is laid over them. Same rows as the
    general path."""
    import numpy as np

    cat = conch.connect(tmp_path, maintenance=conch.Policy(auto=False), memory_budget=16 << 20)
    t = cat.create_table("t", [("id", pa.int64())])
    rng = np.random.default_rng(4)
    for start in range(0, 100_000, 20_000):  # disjoint appends, moved to L1 as they are
        ids = np.arange(start, start + 20_000, dtype=np.int64)
        t.write(pa.table({"id": ids, "a": rng.random(len(ids)), "b": rng.random(len(ids))}))
    t.compact(force=False, policy=conch.Policy(l0_trigger=2))
    assert [(ks.rows, ks.lsm) for ks in t.state().key_spaces.values()] == [(20_000, 1)] * 5
    spread = np.r_[np.arange(1, 100_000, 4), [200_000]].astype(np.int64)
    t.write(pa.table({"id": spread, "a": np.full(len(spread), -1.0)}))
    scan = t.scan()
    got = scan.to_arrow()
    assert scan.metrics().merge == "zip (streamed)"
    assert got.num_rows == 100_001
    assert got.equals(t.scan().with_options(fast_paths=False).to_arrow())
    assert t.scan(where=t["a"] < 0).to_arrow().column("id").to_pylist() == spread.tolist()
