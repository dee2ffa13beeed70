"""`connect(memory_budget=)`: one option sizes every bounded cache and buffer; a small budget
changes how much is held, never what a scan returns; a bad budget is a typed error."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import conch
from conch.errors import InvalidArgumentError
from conch.scan.overlay import OverlayKeys


@pytest.mark.parametrize("bad", [0, 8 << 20, -5, 1.5e9, True, "1G"])
def test_bad_budget_is_refused_before_anything_is_opened(tmp_path: Path, bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="memory_budget"):
        conch.connect(tmp_path / "w", memory_budget=bad)  # type: ignore[arg-type]
    assert not (tmp_path / "w").exists()


def test_small_budget_scans_and_takes_the_same_rows(tmp_path: Path) -> None:
    ids = list(range(0, 4000, 2))
    opts = conch.WriteOptions(chunk_rows=300)
    big = conch.connect(tmp_path / "w", write_options=opts, maintenance=conch.Policy(auto=False))
    t = big.create_table("t", [("id", pa.int64())])
    t.write(pa.table({"id": ids, "a": [float(i) for i in ids]}))
    t.write({"id": list(range(1, 4001, 37)), "a": [-1.0] * len(range(1, 4001, 37))})
    small = conch.connect(tmp_path / "w", memory_budget=64 << 20).table("t")
    assert small.scan().options.cache_bytes < t.scan().options.cache_bytes
    for scan in (lambda x: x.scan(), lambda x: x.scan(keys=[5, 6, 3999, 4000]), lambda x: x.scan(where=x["a"] < 0)):
        assert scan(small).to_pylist() == scan(t).to_pylist()


@pytest.mark.parametrize("budget", [16 << 20, 64 << 20])
def test_key_cache_keeps_a_scans_keys_only_when_they_fit(tmp_path: Path, budget: int) -> None:
    """One admission rule per scan (`KeyCache.fits`): 200k int64 keys do not fit half of a 16 MiB
    budget's key cache (2 MiB), so full, filtered and split scans read their keys and drop them
    (the table's run and its small run); under 64 MiB they fit, so they stay and a second scan
    reads no key bytes. Either way every scan returns the same rows."""
    cat = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    ids = np.arange(0, 400_000, 2, dtype=np.int64)
    t.write(pa.table({"id": ids, "a": ids.astype(np.float64)}))
    up = np.array([-3, 7, 1001, 250_001, 399_998, 500_000], dtype=np.int64)
    t.write(pa.table({"id": up, "a": -up.astype(np.float64)}))
    want = t.scan().to_arrow()
    fresh = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False), memory_budget=budget)
    ft = fresh.table("t")
    cache = fresh.warehouse.key_cache
    scans = [lambda: ft.scan(), lambda: ft.scan(where=ft["a"] < 0)]
    scans += [lambda s=s: ft.scan().within(s.open().plan.within) for s in t.scan().splits(3)]
    for make in scans:
        first = make()
        got = first.to_arrow()
        if first.plan.filter is None and first.plan.within is None:
            assert got.equals(want)
        fits = cache.fits(first.plan.key_spaces, first.plan.key_fields)
        assert fits == (budget > 16 << 20)
        assert all(cache.cached(ks) for ks in first.plan.key_spaces) == fits
        assert not any(cache.cached(ks) for ks in first.plan.key_spaces) or fits
        again = make()
        assert again.to_arrow().equals(got)
        if fits:
            assert again.metrics().key_bytes_read == 0
    fresh.close()


def test_threads_sharing_a_small_key_cache_read_what_one_thread_reads(tmp_path: Path) -> None:
    """Scans and takes from several threads over more key spaces than a 16 MiB budget's key
    cache holds (puts and evictions interleave; the HTTP server and the background settle share
    one cache): every result equals the single-threaded one."""
    import random
    import threading

    cat = conch.connect(tmp_path, memory_budget=16 << 20, maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", pa.int64())])
    for i in range(24):  # overlapping runs of 12k keys: ~2.3 MB of keys, the cache holds 2 MiB
        ids = np.arange(i, 12_000 * 7 + i, 7, dtype=np.int64)
        t.write(pa.table({"id": ids, "v": np.full(len(ids), i, dtype=np.int64)}))
    rng = random.Random(8)
    queries = [sorted(rng.sample(range(90_000), 40)) for _ in range(6)]
    expected_full = t.scan().to_arrow()
    expected = [t.scan(keys=q).to_arrow() for q in queries]
    errors: list[BaseException] = []

    def reader(seed: int) -> None:
        r = random.Random(seed)
        try:
            for _ in range(6):
                if r.random() < 0.3:
                    assert t.scan().to_arrow().equals(expected_full)
                else:
                    j = r.randrange(len(queries))
                    assert t.scan(keys=queries[j]).to_arrow().equals(expected[j])
        except BaseException as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=reader, args=(s,)) for s in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors


@pytest.mark.parametrize("key_type", [pa.uint64(), pa.int32(), pa.timestamp("us")])
def test_numeric_keys_and_overlay_keys_weigh_their_bytes_once(tmp_path: Path, key_type: pa.DataType) -> None:
    """The key cache weighs each byte it holds once: a key space's numeric form, a view of its
    kept key table's buffer, adds no weight (it is taken from the table again), and an overlay's
    key column, a view of its numbers, is not counted beside them. Counted twice, a 5M-key run
    under 10 runs of upserts (1M overlay keys) filled the default 128 MB key cache past its bound:
    each scan evicted the overlay the next one needed and built it again (45 ms → 350 ms a scan)."""
    cat = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = cat.create_table("t", [("id", key_type)])
    ids = np.arange(0, 40_000, 2, dtype=np.int64)
    t.write(pa.table({"id": pa.array(ids).cast(key_type), "a": ids.astype(np.float64)}))
    up = np.arange(1, 4_001, 4, dtype=np.int64)  # keys the run does not hold, and some it does
    t.write(pa.table({"id": pa.array(np.r_[up, ids[:500]]).cast(key_type).sort(), "a": np.zeros(1500)}))
    want = t.scan().to_arrow()
    fresh = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    ft = fresh.table("t")
    cache = fresh.warehouse.key_cache
    plan = ft.scan().plan
    run, fields = max(plan.key_spaces, key=lambda ks: ks.rows), plan.key_fields
    table = cache.keys(run, fields)
    weight = cache._lru.weight
    numbers = cache.numeric(run, fields)
    assert cache._lru.weight == weight == table.nbytes
    assert (
        numbers.tolist() == table.column(0).cast(pa.int64() if key_type == pa.timestamp("us") else key_type).to_pylist()
    )
    got = ft.scan()
    assert got.to_arrow().equals(want)
    (overlay,) = [v for k, v in cache._lru._items.items() if k[0] == "derived" and isinstance(v, OverlayKeys)]
    assert overlay.nbytes == len(overlay.hit) + sum(
        a.nbytes for a in [overlay.ins, overlay.numbers, *overlay.pos, *overlay.rows]
    )
    again = ft.scan()
    assert again.to_arrow().equals(want)
    assert again.metrics().key_bytes_read == 0
    fresh.close()
