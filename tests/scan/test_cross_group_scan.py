"""spec/001's scan shape: a filter on one column group and a projection of another (filter the
metadata, take the audio). Where the key spaces hold identical key sets the streamed path filters
in-file and takes the other group's cells by key-space row (`Stream._taken`); over any history of
upserts, partial upserts and deletes the result must be exactly the fresh records of a model."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

import conch

KEYS = list(range(0, 90, 3))


def _audio(vals: list[tuple[bytes | None, int | None]]) -> pa.StructArray:
    return pa.StructArray.from_arrays(
        [pa.array([b for b, _ in vals], pa.binary()), pa.array([s for _, s in vals], pa.int64())], ["bytes", "size"]
    )


class Model:
    """Per key: its newest tombstone's commit and each column's newest (commit, value)."""

    def __init__(self) -> None:
        self.commit = 0
        self.tomb: dict[int, int] = {}
        self.cells: dict[tuple[int, str], tuple[int, Any]] = {}

    def write(self, rows: dict[int, dict[str, Any]]) -> None:
        self.commit += 1
        for k, cols in rows.items():
            for c, v in cols.items():
                self.cells[(k, c)] = (self.commit, v)

    def delete(self, keys: list[int]) -> None:
        self.commit += 1
        for k in keys:
            self.tomb[k] = self.commit

    def records(self) -> dict[int, dict[str, Any]]:
        out: dict[int, dict[str, Any]] = {}
        for (k, c), (when, v) in self.cells.items():
            if when > self.tomb.get(k, 0):
                out.setdefault(k, {})[c] = v
        return {k: out[k] for k in sorted(out)}


def _keyless(rec: dict[str, Any]) -> dict[str, Any]:
    """A record as a scan with `ScanOptions(with_keys=False)` outputs it: no key column."""
    return {c: v for c, v in rec.items() if c != "id"}


def _check(t: conch.Table, model: Model, x: float, cols: tuple[str, ...], lo: int | None, limit: int | None) -> str:
    """One scan vs the model (and vs the general path); returns the merge the scan used."""
    both = "n" in cols  # then the filter reads two columns of the metadata group
    want = []
    for k, r in model.records().items():
        m, n = r.get("m"), r.get("n")
        if (lo is not None and k < lo) or m is None or not m < x or (both and (n is None or not n > 0)):
            continue
        rec: dict[str, Any] = {"id": k, "audio": {c.split(".")[1]: r.get(c.split(".")[1]) for c in cols if "." in c}}
        if both:
            rec["n"] = n
        want.append(rec)
    where = (t["m"] < x) & (t["n"] > 0) if both else t["m"] < x
    scan = t.scan(*cols, where=where, keys=conch.KeyRange((lo,), None) if lo is not None else None, limit=limit)
    got = scan.to_pylist()
    assert got == scan.with_options(fast_paths=False).to_pylist(), (cols, x, lo, limit)
    assert got == want[:limit], (cols, x, lo, limit)
    assert scan.with_options(with_keys=False).to_pylist() == [_keyless(r) for r in got], (cols, x, lo, limit)
    return scan.metrics().merge


def _check_take(t: conch.Table, model: Model, keys: list[int], cols: tuple[str, ...], limit: int | None) -> str:
    """A take of `keys` (present, absent, deleted) vs the model (and the general path)."""
    recs = model.records()
    want = []
    for k in sorted(set(keys)):
        if k in recs:
            rec: dict[str, Any] = {
                "id": k,
                "audio": {c[6:]: recs[k].get(c[6:]) for c in cols if c.startswith("audio.")},
            }
            if "n" in cols:
                rec["n"] = recs[k].get("n")
            want.append(rec)
    scan = t.scan(*cols, keys=keys, limit=limit)
    got = scan.to_pylist()
    assert got == scan.with_options(fast_paths=False).to_pylist(), (keys, cols, limit)
    assert got == want[:limit], (keys, cols, limit)
    assert scan.with_options(with_keys=False).to_pylist() == [_keyless(r) for r in got], (keys, cols, limit)
    return scan.metrics().merge


OPS = st.lists(
    st.tuples(
        st.sampled_from(["meta", "m_only", "audio", "both", "delete", "meta_all", "audio_all"]),
        st.lists(st.sampled_from([*KEYS, 1, 200]), min_size=1, max_size=12, unique=True),
        st.integers(0, 1000),
    ),
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(ops=OPS, data=st.data())
def test_filter_one_group_project_another_is_fresh(ops: list[tuple[str, list[int], int]], data: Any) -> None:
    """After the aligned write (metadata, then audio, of the same keys: the streamed cross-group
    take) and random later upserts, partial upserts (only `m`) and deletes, a scan filtering on
    `m` (and `n`; NaN and null fail it) and projecting the audio group, and a take of present,
    absent and deleted keys (the direct take, `scan/pick.py`, where the key sets are identical),
    return exactly the model's fresh records: never a stale value, never a deleted key; fast and
    general paths agree."""
    opts = conch.WriteOptions(chunk_rows=11, fragment_bytes=64, large_value_bytes=8)
    with tempfile.TemporaryDirectory() as d:
        cat = conch.connect(Path(d) / "w", write_options=opts, maintenance=conch.Policy(auto=False))
        if data.draw(st.booleans(), label="filter inside Vortex scans"):
            cat.warehouse.format.hot.max_bytes = 0  # no fragment is kept decoded: Vortex filters
        t = cat.create_table("t", [("id", pa.int64())])
        model = Model()

        def write(kind: str, keys: list[int], seed: int) -> None:
            keys = sorted(keys)
            vals = {k: (seed * 7 + k) % 101 / 100 for k in keys}
            rows: dict[int, dict[str, Any]] = {k: {} for k in keys}
            cols: dict[str, Any] = {"id": keys}
            if kind in ("meta", "m_only", "both"):
                cols["m"] = [(vals[k] if (k + seed) % 13 else math.nan) if (k + seed) % 9 else None for k in keys]
                for k, v in zip(keys, cols["m"], strict=True):
                    rows[k]["m"] = v
            if kind in ("meta", "both"):
                cols["n"] = [(k + seed) % 5 - 2 for k in keys]
                for k, v in zip(keys, cols["n"], strict=True):
                    rows[k]["n"] = v
            if kind in ("audio", "both"):
                audio = [(bytes([seed % 256]) * (k % 13 + 1), k + seed) for k in keys]
                cols["audio"] = _audio(audio)
                for k, (b, s) in zip(keys, audio, strict=True):
                    rows[k]["bytes"], rows[k]["size"] = b, s
            t.write(pa.table(cols))
            model.write(rows)

        write("meta", KEYS, 1)
        write("audio", KEYS, 2)
        merges, takes = [], []
        for kind, keys, seed in ops:
            if kind.endswith("_all"):  # a rewrite of every key: identical key sets again
                kind, keys = kind[:-4], KEYS
            if kind == "delete":
                t.delete(keys)
                model.delete(keys)
            else:
                write(kind, keys, seed)
            x = data.draw(st.sampled_from([0.05, 0.3, 0.7, 2.0]))
            cols = data.draw(st.sampled_from([("audio.bytes",), ("audio.bytes", "audio.size"), ("n", "audio.bytes")]))
            lo = data.draw(st.sampled_from([None, 30]))
            limit = data.draw(st.sampled_from([None, 2]))
            merges.append(_check(t, model, x, cols, lo, limit))
            want = data.draw(st.lists(st.sampled_from([*KEYS, 1, 200, 7]), min_size=1, max_size=8))
            takes.append(_check_take(t, model, want, ("n", "audio.bytes", "audio.size")[: len(cols) + 1], limit))
        merges.append(_check(t, model, 0.5, ("audio.bytes",), None, None))
        takes.append(_check_take(t, model, [0, 3, 4, 87], ("audio.bytes", "n"), None))
        if all(kind.endswith("_all") for kind, _, _ in ops):  # key sets stay identical: streamed
            assert set(merges) == {"zip (streamed)"}
            if not any(kind == "delete_all" for kind, _, _ in ops):
                assert set(takes) == {"zip (take)"}  # and a take is direct
        cat.close()


def test_spec001_scan_takes_audio_by_row(tmp_path: Path) -> None:
    """The aligned spec/001 table: the filter runs in-file on the metadata group, and the audio
    group reads only the passing rows, by fragment row: no key merge, no fresh-cell location."""
    opts = conch.WriteOptions(chunk_rows=50, fragment_bytes=2048, large_value_bytes=8)
    cat = conch.connect(tmp_path / "w", write_options=opts, maintenance=conch.Policy(auto=False))
    t = cat.create_table("a", [("id", pa.uint64())])
    ids = list(range(400))
    t.write({"id": ids, "silence_ratio": [(i * 37 % 400) / 400 for i in ids]})
    t.write(pa.table({"id": pa.array(ids, pa.uint64()), "audio": _audio([(b"%d" % i * 30, i) for i in ids])}))
    scan = t.scan("audio.bytes", where=t["silence_ratio"] < 0.05)
    got = scan.to_arrow()
    want = [i for i in ids if (i * 37 % 400) / 400 < 0.05]
    assert got.column("id").to_pylist() == want
    assert [r["bytes"] for r in got.column("audio").to_pylist()] == [b"%d" % i * 30 for i in want]
    m = scan.metrics()
    assert m.merge == "zip (streamed)"
    assert m.groups["audio"].rows_read == len(want)
    assert m.groups["<root>"].fragments_filtered >= 1
    # the metadata fragments are small: kept decoded, a second scan filters them without a read
    again = t.scan("audio.bytes", where=t["silence_ratio"] < 0.05)
    assert again.to_arrow().equals(got)
    assert again.metrics().groups["<root>"].bytes_read == 0
    assert again.metrics().groups["<root>"].fragments_filtered >= 1
    cat.close()


def test_kept_columns_are_the_fragments_own(tmp_path: Path) -> None:
    """Decoded columns are kept by fragment file (and mask): a newer write of the metadata,
    a rewrite of the same keys, is filtered on its own cells, never on the older file's."""
    cat = conch.connect(tmp_path / "w", maintenance=conch.Policy(auto=False))
    t = cat.create_table("a", [("id", pa.uint64())])
    ids = list(range(100))
    t.write({"id": ids, "m": [0.0] * 100})
    t.write(pa.table({"id": pa.array(ids, pa.uint64()), "audio": _audio([(b"x", i) for i in ids])}))
    assert t.scan("audio.bytes", where=t["m"] < 0.5).to_arrow().num_rows == 100
    t.write({"id": ids, "m": [1.0 if i % 2 else 0.0 for i in ids]})
    got = t.scan("audio.bytes", where=t["m"] < 0.5).to_arrow()
    assert got.column("id").to_pylist() == ids[::2]
    cat.close()
