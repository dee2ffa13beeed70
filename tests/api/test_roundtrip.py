"""Writes in every accepted form, types, schema evolution, streaming, and the README walkthrough."""

from __future__ import annotations

import datetime as dt
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl
import pyarrow as pa
import pytest

import conch
from helpers import local_path


def test_every_input_form_gives_the_same_table(catalog: conch.Catalog) -> None:
    rows = [{"id": 1, "x": 1.5, "s": "a"}, {"id": 2, "x": None, "s": "b"}]
    forms = {
        "pylist": rows,
        "dict": {"id": [1, 2], "x": [1.5, None], "s": ["a", "b"]},
        "arrow": pa.Table.from_pylist(rows),
        "batch": pa.RecordBatch.from_pylist(rows),
        "reader": pa.RecordBatchReader.from_batches(
            pa.Table.from_pylist(rows).schema, pa.Table.from_pylist(rows).to_batches()
        ),
        "pandas": pd.DataFrame(rows),
        "polars": pl.DataFrame(rows),
    }
    for name, data in forms.items():
        t = catalog.create_table(name, [("id", pa.int64())], pa.schema([("x", pa.float64()), ("s", pa.string())]))
        t.write(data)
        assert t.scan().to_pylist() == rows, name


def test_types_round_trip(catalog: conch.Catalog) -> None:
    tensor = pa.fixed_shape_tensor(pa.float32(), [2, 3])
    data = pa.table(
        {
            "k": pa.array([dt.datetime(2024, 1, d) for d in (3, 1, 2)], pa.timestamp("us")),
            "b": pa.array([True, None, False]),
            "i8": pa.array([-1, 2, None], pa.int8()),
            "u32": pa.array([1, 2, 3], pa.uint32()),
            "f32": pa.array([0.5, None, 1.5], pa.float32()),
            "s": ["x", None, "z"],
            "bin": pa.array([b"\x00\x01", b"", None]),
            "tags": pa.array([["a"], [], None], pa.list_(pa.string())),
            "day": pa.array([dt.date(2020, 1, 1)] * 3),
            "vec": pa.array([[1, 2], [3, 4], None], pa.list_(pa.int64(), 2)),
            "img": pa.ExtensionArray.from_storage(
                tensor, pa.FixedSizeListArray.from_arrays(pa.array(np.arange(18, dtype=np.float32)), 6)
            ),
            "blob": pa.array([b"x" * 5000, None, b"y" * 7000]),
            "meta": pa.array([{"w": 1, "inner": {"z": "q"}}] * 3),
        }
    )
    t = catalog.create_table("types", [("k", pa.timestamp("us"))])
    t.write(data)
    out = t.scan().to_arrow()
    want = data.sort_by("k")
    for name in data.column_names:
        assert out.column(name).combine_chunks().equals(want.column(name).combine_chunks()), name
    assert out.schema.field("img").type == tensor
    # blobs went out of line, and a take reads exactly the bytes of the rows taken
    frag = next(f for f in t.state().fragments.values() if f.blob_columns)
    assert frag.blob_columns
    scan = t.scan("blob", keys=[dt.datetime(2024, 1, 3)])
    assert scan.to_pylist() == [{"k": dt.datetime(2024, 1, 3), "blob": b"x" * 5000}]
    assert sum(scan.metrics().bytes_read.values()) == 5000


def test_schema_evolution_and_column_groups(catalog: conch.Catalog) -> None:
    t = catalog.create_table("audio", [("id", pa.uint64())])
    t.write([{"id": 1, "silence_ratio": 0.5}])
    t.write([{"id": 2, "audio": {"bytes": b"abc", "meta": {"size": 3}}}])
    t.write(pa.table({"id": pa.array([1], pa.uint64()), "silence_ratio": pa.array([1], pa.int64())}))  # int → f64
    assert t.schema.columns == ["silence_ratio", "audio.bytes", "audio.meta.size"]
    assert t.scan().to_pylist() == [
        {"id": 1, "silence_ratio": 1.0, "audio": {"bytes": None, "meta": {"size": None}}},
        {"id": 2, "silence_ratio": None, "audio": {"bytes": b"abc", "meta": {"size": 3}}},
    ]
    assert t.scan("audio.meta").to_pylist() == [
        {"id": 1, "audio": {"meta": {"size": None}}},
        {"id": 2, "audio": {"meta": {"size": 3}}},
    ]
    assert set(t.manifests()) == {"key_spaces", "/", "/audio", "/audio.meta"}
    assert "└── audio: struct" in str(t.schema)


def test_streaming_write_and_scan_in_bounded_batches(tmp_path: Path) -> None:
    cat = conch.connect(tmp_path / "w", write_options=conch.WriteOptions(chunk_rows=1000))
    t = cat.create_table("t", [("id", pa.int64())])
    schema = pa.schema([("id", pa.int64()), ("v", pa.float64())])

    def batches():
        for start in range(0, 10_000, 500):
            ids = np.arange(start, start + 500)[::-1].copy()  # unsorted input
            yield pa.record_batch({"id": ids, "v": ids * 0.5}, schema=schema)

    c = t.write(pa.RecordBatchReader.from_batches(schema, batches()))
    # the write's own state (automatic compaction may fold the runs right after it)
    assert len(t.state_at(version=c.seq).key_spaces) == 10, "one sorted run per bounded chunk"
    reader = t.scan().to_record_batches()
    total, last = 0, -1
    for b in reader:
        ids = b.column("id").to_numpy()
        assert ids[0] > last and (np.diff(ids) > 0).all(), "batches come sorted by key"
        last, total = ids[-1], total + b.num_rows
    assert total == 10_000


def test_key_filtration_forms(catalog: conch.Catalog) -> None:
    t = catalog.create_table("t", [("a", pa.string()), ("b", pa.int64())])
    t.write([{"a": a, "b": b, "v": i} for i, (a, b) in enumerate([("x", 1), ("x", 2), ("y", 1), ("z", 5)])])
    keys = lambda s: [(r["a"], r["b"]) for r in s.to_pylist()]  # noqa: E731
    assert keys(t.scan(keys=[("y", 1), ("x", 2), ("q", 0)])) == [("x", 2), ("y", 1)]
    assert keys(t.scan(keys=conch.KeyPrefix(("x",)))) == [("x", 1), ("x", 2)]
    assert keys(t.scan(keys=conch.KeyRange(("x", 2), ("z",)))) == [("x", 2), ("y", 1)]
    assert keys(t.scan(keys=pa.table({"a": ["z"], "b": [5]}))) == [("z", 5)]
    assert keys(t.scan(limit=2)) == [("x", 1), ("x", 2)]


def test_pandas_polars_and_datetime_time_travel(tmp_path: Path) -> None:
    t = conch.connect(tmp_path, maintenance=conch.Policy(auto=False)).create_table(
        "t", [("id", pa.int64())]
    )  # history() counts commits
    c1 = t.write([{"id": 1, "v": "a"}])
    t.write([{"id": 1, "v": "b"}])
    assert t.scan(asof=c1.datetime).to_pandas().to_dict("records") == [{"id": 1, "v": "a"}]
    assert t.scan().to_polars().to_dicts() == [{"id": 1, "v": "b"}]
    assert [c.kind for c in t.history()] == ["write", "write"]


def test_spec001_audio_story(catalog: conch.Catalog) -> None:
    """The issue's acceptance story: metadata and audio in separate commits, an update, deletes,
    filtered scans and time travel give exactly the fresh records."""
    t = catalog.create_table("audio", [("id", pa.uint64())])
    c_meta = t.write([{"id": i, "audio_length": float(i), "silence_ratio": i / 10} for i in range(10)])
    t.write(
        [{"id": i, "audio": {"bytes": bytes([i]) * 600, "meta": {"size": 600, "e_tag": f"e{i}"}}} for i in range(10)]
    )
    t.write([{"id": 9, "silence_ratio": 0.0}])
    c_del = t.delete([0, 5])
    scan = catalog.scan(t["audio.bytes"], where=t["silence_ratio"] < 0.25)
    assert scan.to_pylist() == [{"id": i, "audio": {"bytes": bytes([i]) * 600}} for i in (1, 2, 9)]
    assert t.scan("silence_ratio", asof=c_meta.time, where=t["silence_ratio"] < 0.25).to_pylist() == [
        {"id": i, "silence_ratio": i / 10} for i in (0, 1, 2)
    ]
    assert t.scan("audio.meta.e_tag", asof=c_del.time - 1, keys=[0, 5]).to_pylist() == [
        {"id": 0, "audio": {"meta": {"e_tag": "e0"}}},
        {"id": 5, "audio": {"meta": {"e_tag": "e5"}}},
    ]
    assert "filter" in scan.explain()


def test_readme_walkthrough_runs(tmp_path: Path) -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    code = readme.split("```python", 1)[1].split("```", 1)[0]
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "silence_ratio" in proc.stdout


@pytest.mark.parametrize("missing", ["pandas", "polars"])
def test_missing_optional_dependency_names_the_extra(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    from conch.model.deps import optional_import

    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(conch.MissingDependencyError, match=f"conch\\[{missing}\\]"):
        optional_import(missing)


def test_catalog_lifecycle_and_filter_forms(catalog: conch.Catalog) -> None:
    t = catalog.create_table("a", {"id": pa.int32()})
    catalog.create_table("b", pa.schema([("k", pa.string())]))
    assert catalog.list_tables() == ["a", "b"]
    t.write(
        [{"id": i, "label": lbl, "score": s} for i, (lbl, s) in enumerate([("car", 0.9), ("bus", None), ("car", 0.2)])]
    )
    ids = lambda s: [r["id"] for r in s.to_pylist()]  # noqa: E731
    assert ids(t.scan(where=t["label"].isin(["bus", "tram"]))) == [1]
    assert ids(t.scan(where=~(t["label"] == "car") | t["score"].is_null())) == [1]
    assert ids(t.scan(where=(t["label"] == "car") & (t["score"] > 0.5))) == [0]
    assert ids(t.scan(where=t["score"].is_not_null())) == [0, 2]
    t.delete(pa.table({"id": pa.array([0, 2], pa.int32())}))
    assert ids(t.scan()) == [1]
    path = local_path(catalog.warehouse.storage, t.id)
    catalog.drop_table("a")
    assert catalog.list_tables() == ["b"]
    assert not Path(path).exists()
    with pytest.raises(conch.TableNotFoundError):
        catalog.table("a")
