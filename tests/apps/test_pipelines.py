"""Pipelines on Spark: ingest from files, enrich with mapInArrow, and the demo end to end."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest
from rich.console import Console

import conch
from conch.apps.pipelines.generate import AUDIO_SCHEMA, audio_batches
from conch.log.wal import AddFragment, RemoveFragment, RemoveKeySpace
from conftest_spark import spark_session
from services import Postgres

pytestmark = pytest.mark.spark


@pytest.fixture(scope="session")
def spark() -> Any:
    return spark_session()


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "csv"])
def test_ingest_files(spark: Any, tmp_path: Path, fmt: str) -> None:
    from conch.apps.pipelines.ingest import ingest

    data = pa.table({"id": list(range(50)), "name": [f"n{i}" for i in range(50)], "x": [i / 2 for i in range(50)]})
    src = tmp_path / "in"
    src.mkdir()
    for part in range(2):
        chunk = data.slice(part * 25, 25)
        path = src / f"part-{part}.{fmt}"
        if fmt == "parquet":
            pq.write_table(chunk, path)
        elif fmt == "csv":
            pacsv.write_csv(chunk, path)
        else:
            path.write_text("".join(json.dumps(r) + "\n" for r in chunk.to_pylist()))
    res = ingest(spark, str(src), str(tmp_path / "wh"), "t", key=["id"], partitions=3)
    t = conch.connect(tmp_path / "wh").table("t")
    assert res.rows == 50 and res.seq == 1
    out = t.scan().to_arrow()
    assert out.column("id").to_pylist() == list(range(50))
    assert out.column("x").to_pylist() == data.column("x").to_pylist()
    runs = t.manifests(version=res.seq)["key_spaces"]  # as the ingest committed them (compaction may follow)
    assert runs.num_rows == 3  # range-partitioned: one disjoint run per task
    spans = sorted(zip(runs.column("min_key").to_pylist(), runs.column("max_key").to_pylist(), strict=True))
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans))


def test_ingest_csv_comments_and_timestamp_format_on_spark(spark: Any, tmp_path: Path) -> None:
    """`conch ingest --spark`: a leading `#` block is skipped, `--timestamp-format` (strptime) is
    translated to Spark's pattern (`%d-%b-%y` → `dd-MMM-yy`)."""
    from conch.apps.pipelines.ingest import ingest
    from conch.apps.pipelines.spark_csv import CsvOptions, spark_pattern

    assert spark_pattern("%Y-%m-%dT%H:%M:%S") == "yyyy-MM-dd'T'HH:mm:ss"
    src = tmp_path / "prices.csv"
    src.write_text("# Daily prices\n# source: a, b\nDate,Open\n19-Sep-03,1.5\n# later\n22-Sep-03,2.25\n")
    res = ingest(spark, str(src), str(tmp_path / "wh"), "p", key=["Date"], csv=CsvOptions(None, ("%d-%b-%y",)))
    t = conch.connect(tmp_path / "wh").table("p")
    assert res.rows == 2 and pa.types.is_timestamp(t.key_schema.field("Date").type)
    rows = t.scan().to_pylist()
    assert [(r["Date"].strftime("%Y-%m-%d"), r["Open"]) for r in rows] == [("2003-09-19", 1.5), ("2003-09-22", 2.25)]


def test_enrich_adds_a_group_without_rewriting(spark: Any, tmp_path: Path) -> None:
    from conch.apps.pipelines.enrich import audio_features

    cat = conch.connect(tmp_path / "wh")
    t = cat.create_table("audio", [("id", pa.uint64())], pa.schema(list(AUDIO_SCHEMA)[1:]))
    t.write(pa.Table.from_batches(list(audio_batches(200, batch_rows=50))))
    before = {f.id: f for f in t.state().fragments.values()}
    inputs = ["audio.bytes", "audio_length"]
    res = t.enrich(audio_features, inputs=inputs, into="features", engine="spark", spark=spark)
    assert res.rows_written == 200
    # the enrich's own commits (automatic compaction may follow them) add only its group's fragments
    ops = [op for seq, _, e in t.log.entries() if seq in res.commits for op in e.ops]
    assert before and not [op for op in ops if isinstance(op, (RemoveFragment, RemoveKeySpace))]
    assert {op.fragment.group for op in ops if isinstance(op, AddFragment)} == {"features"}
    feats = t.scan("features", "audio_length").to_arrow()
    rms = feats.column("features").combine_chunks().field("rms")
    assert rms.null_count == 0 and min(rms.to_pylist()) > 1000  # noise with sigma 3000
    # the feature was computed from the right row: bytes per second = blob size / length
    sizes = t.scan("audio.meta.size").to_arrow().column("audio").combine_chunks().field("meta").field("size")
    bps = feats.column("features").combine_chunks().field("bytes_per_second").to_pylist()
    lengths = feats.column("audio_length").to_pylist()
    assert all(abs(b - s / n) < 1e-6 for b, s, n in zip(bps, sizes.to_pylist(), lengths, strict=True))
    # incremental on Spark too: nothing changed, nothing written; one changed key, one row
    assert not t.enrich(audio_features, inputs=inputs, into="features", engine="spark", spark=spark).wrote
    t.write({"id": [7], "audio_length": [99.0]})
    again = t.enrich(audio_features, inputs=inputs, into="features", engine="spark", spark=spark)
    assert again.rows_written == 1 and again.keys == 1


def test_enrich_on_spark_reaches_the_table_as_the_driver_connected(
    spark: Any, tmp_path: Path, postgres: Postgres
) -> None:
    # a PostgreSQL metastore: executors that reopened the bare warehouse path (its files, no
    # metastore there) would not find the table
    dsn = postgres.dsn()
    t = conch.connect(tmp_path / "wh", metastore=dsn).create_table("t", [("id", pa.int64())])
    t.write({"id": list(range(50)), "x": [float(i) for i in range(50)]})

    def double_x(batch: pa.RecordBatch) -> dict[str, Any]:  # local: Spark workers get it by value
        return {"twice": pc.multiply(batch.column("x"), 2.0)}

    res = t.enrich(double_x, inputs=["x"], into="f", engine="spark", spark=spark)
    assert res.rows_written == 50
    again = conch.connect(tmp_path / "wh", metastore=dsn).table("t").scan("f.twice").to_arrow()
    assert again.column("f").combine_chunks().field("twice").to_pylist() == [2.0 * i for i in range(50)]
    assert not (tmp_path / "wh" / "_catalog.sqlite").exists()  # nothing opened an embedded metastore


def test_demo_end_to_end(spark: Any, tmp_path: Path) -> None:
    from conch.apps.pipelines.demo import run

    console = Console(record=True, width=120)
    res = run(str(tmp_path / "demo"), rows=400, console=console, spark=spark)
    assert res["ingested"] == 400 and res["enriched"] == 400 and res["untouched"]
    assert res["scan_rows"] == res["spark_scan_rows"] > 0 and res["pushed"]
    assert res["rows_before"] == res["spark_rows_before"] == 400
    assert "features" not in res["columns_before"] and "features" not in res["spark_columns_before"]
    assert res["mirror_equal"] and res["batches"] >= 2 and res["tagged"] > 0
    assert res["branch_hidden"] and res["branch_same"]
    text = console.export_text()
    assert "Time travel" in text and "Stream only the changes" in text and "on a branch" in text and "total" in text


DEMO_ON_S3 = """
import json, sys
from rich.console import Console
from conch.apps.pipelines.demo import run
res = run(sys.argv[1], rows=300, console=Console(width=120), s3=True)
print(json.dumps({k: v for k, v in res.items() if k != "seconds"}))
"""


def test_demo_on_s3(tmp_path: Path) -> None:
    """`conch demo --s3`: the same pipeline with the table on s3:// (a moto server the demo starts
    and stops itself, the object-store WAL). Its own process, since its Spark workers must start
    with the environment that points at the server."""
    import subprocess
    import sys

    local = tmp_path / "demo"
    proc = subprocess.run(
        [sys.executable, "-c", DEMO_ON_S3, str(local)], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    assert res["warehouse"] == "s3://conch-demo/demo"
    assert res["ingested"] == res["enriched"] == 300 and res["untouched"]
    assert res["scan_rows"] == res["spark_scan_rows"] > 0 and res["pushed"]
    assert res["rows_before"] == res["spark_rows_before"] == 300
    assert "features" not in res["columns_before"] and "features" not in res["spark_columns_before"]
    # nothing of the table on local disk: only the generated input is
    assert sorted(p.name for p in local.iterdir()) == ["_input"]
    assert "Start a local S3 server" in proc.stdout


def test_ingest_csv_on_spark_reads_by_the_rules_of_conch_write(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`ingest --spark` and `conch write` make the same table of a CSV file: null markers are null
    in text columns too, and a value that would change a column's type, an empty key field and a
    malformed line are `SchemaError`s naming the line (before: Spark made `lat` text without a
    word, read `NA` as the text "NA", and wrote an empty key)."""
    from conch.apps.pipelines import spark_csv
    from conch.apps.pipelines.ingest import ingest
    from conch.write.file_input import FileInput, read_files

    good = tmp_path / "good.csv"
    good.write_text("id,lat,sex\n1,1.5,F\n2,NA,NA\n3,2.5,\n4,-0.5,M\n")
    ingest(spark, str(good), str(tmp_path / "wh"), "good", key=["id"])
    spark_rows = conch.connect(tmp_path / "wh").table("good").scan().to_arrow()
    local = read_files(FileInput([good], key=("id",))).read_all()
    assert spark_rows.column("lat").type == local.column("lat").type == pa.float64()
    assert spark_rows.to_pylist() == local.to_pylist()
    assert spark_rows.column("sex").null_count == 2  # "NA" and the empty field

    def refused(name: str, text: str, match: str) -> None:
        path = tmp_path / f"{name}.csv"
        path.write_text(text)
        with pytest.raises(conch.SchemaError, match=match):
            ingest(spark, str(path), str(tmp_path / "wh"), name, key=["id"])
        with pytest.raises(conch.errors.TableNotFoundError):
            conch.connect(tmp_path / "wh").table(name)  # nothing was committed

    numbers = "".join(f"{i},{i / 4}\n" for i in range(1, 40))
    refused(
        "odd", f"id,lat\n{numbers}40,not_a_number\n", r"column 'lat' holds numbers, but line 41 holds 'not_a_number'"
    )
    refused("nokey", "id,lat\n1,1.5\nNA,2.5\n", r"no value for key column 'id'")
    refused("short", "id,lat,name\n1,1.5,a\n2,2.5\n", r"line 3 has another number of fields than the header's 3")
    monkeypatch.setattr(spark_csv, "SAMPLE_ROWS", 5)  # a bad value past the rows the types come from
    refused("later", f"id,lat\n{numbers}40,n/a\n41,north\n", r"column 'lat' is double .* line 42 holds 'north'")
