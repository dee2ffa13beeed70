"""Change feeds on Spark (`conch.engines.spark.streaming`): batch reads of changes, a Structured Streaming
source over a table a writer keeps committing to (stopped and restarted from its checkpoint: the
union of the micro-batches is `changes(start, end, per_commit=True)`, nothing twice), the sink
under a retried micro-batch (commits once), and a mirror kept by `applyChanges`."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import conch
import conch.engines.spark
from conftest_spark import spark_session

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def spark() -> Any:
    return spark_session()


def _source(wh: Path) -> conch.Table:
    cat = conch.connect(str(wh), maintenance=conch.Policy(settle_after=None))
    t = cat.create_table("src", [("id", pa.int64())])
    t.write(pa.table({"id": pa.array(range(20), pa.int64()), "x": pa.array(range(20), pa.int64())}))
    return t


def _commit_some(t: conch.Table, round_: int) -> None:
    """Three commits: upserts (new and existing keys), a delete, an update by predicate."""
    base = 100 * round_
    t.write([{"id": i, "x": base + i} for i in range(round_, 30, 4)])
    t.delete([round_ + 1, round_ + 9])
    t.update(where=t["x"] < base + 10, set={"x": -round_})


def _rows(t: conch.Table) -> list[dict[str, Any]]:
    return sorted(t.to_arrow().to_pylist(), key=lambda r: (r["id"], r.get("_version", 0)))


def test_batch_read_of_changes(spark: Any, tmp_path: Path) -> None:
    t = _source(tmp_path / "wh")
    v = t.state().seq
    _commit_some(t, 1)
    df = spark.read.format("conch").option("changesSince", str(v)).option("images", "before_and_after")
    got = df.load(str(tmp_path / "wh" / "src")).toArrow().to_pylist()
    assert got == t.changes(v, images="before_and_after").to_pylist()
    per = spark.read.format("conch").option("changesSince", str(v)).option("perCommit", "true")
    assert per.load(str(tmp_path / "wh" / "src")).count() == t.changes(v, per_commit=True).count()


def test_stream_restarts_from_checkpoint_and_sink_commits_each_batch_once(spark: Any, tmp_path: Path) -> None:
    t = _source(tmp_path / "wh")
    start = t.state().seq
    path = str(tmp_path / "wh" / "src")
    sink_path = str(tmp_path / "wh" / "feed")
    checkpoint = tmp_path / "checkpoint"

    def run(rounds: list[int]) -> None:
        stream = spark.readStream.format("conch").option("changesSince", str(start)).option("perCommit", "true")
        query = (
            stream.load(path)
            .writeStream.format("conch")
            .option("checkpointLocation", str(checkpoint))
            .option("key", "id,_version")
            .start(sink_path)
        )
        writer = threading.Thread(target=lambda: [_commit_some(t, r) for r in rounds])
        writer.start()  # a writer keeps committing while the query runs
        writer.join()
        query.processAllAvailable()
        query.stop()

    run([1, 2])
    run([3])  # restarted from the checkpoint: continues after the last committed offset
    feed = conch.connect(str(tmp_path / "wh")).table("feed")
    end = t.state().seq
    want = sorted(t.changes(start, end, per_commit=True).to_pylist(), key=lambda r: (r["id"], r["_version"]))
    assert _rows(feed) == want
    batches = [c for c in feed.history() if "stream batch" in c.summary]
    written = sum(int(c.summary.split(": ")[1].split(" rows")[0]) for c in batches if "no rows" not in c.summary)
    assert written == len(want)  # nothing twice: every change row was written by exactly one micro-batch

    # Spark re-runs the last micro-batch when its commit is not in the checkpoint (a kill between
    # the sink's commit and the checkpoint's): the sink must not commit it again
    commits = sorted((checkpoint / "commits").iterdir(), key=lambda p: int(p.name) if p.name.isdigit() else -1)
    last = [p for p in commits if p.name.isdigit()][-1]
    last.unlink()
    for crc in checkpoint.joinpath("commits").glob(f".{last.name}.crc"):
        crc.unlink()
    seqs_before = feed.state().seq
    run([])
    assert last.exists()  # Spark did run that micro-batch again, and recorded it this time
    assert _rows(feed) == want
    retried = [c for c in feed.history() if c.seq > seqs_before and c.kind == "write"]
    assert retried == []


def test_stream_mirror_applies_changes(spark: Any, tmp_path: Path) -> None:
    t = _source(tmp_path / "wh")
    mirror = conch.connect(str(tmp_path / "wh")).create_table(
        "mirror", [("id", pa.int64())], pa.schema([("x", pa.int64())])
    )
    checkpoint = tmp_path / "mirror-checkpoint"
    for rounds in ([1], [2, 3]):
        query = (
            spark.readStream.format("conch")
            .option("changesSince", "0")  # the whole table first, then its changes
            .load(str(tmp_path / "wh" / "src"))
            .writeStream.format("conch")
            .option("checkpointLocation", str(checkpoint))
            .option("applyChanges", "true")
            .start(str(tmp_path / "wh" / "mirror"))
        )
        for r in rounds:
            _commit_some(t, r)
        query.processAllAvailable()
        query.stop()
        assert _rows(mirror) == _rows(t)


def test_stream_needs_changes_since(spark: Any, tmp_path: Path) -> None:
    _source(tmp_path / "wh")
    with pytest.raises(Exception, match="changesSince"):
        spark.readStream.format("conch").load(str(tmp_path / "wh" / "src")).writeStream.format("memory").queryName(
            "nope"
        ).start().processAllAvailable()
