"""Backends side by side: commit latency and throughput per metastore, scans per storage.

    .venv/bin/python -m bench.backends [--commits 40] [--rows 5000] [--only commits,scans,spark]
    .venv/bin/python -m bench --only b            # the same, inside the main benchmark run

- **Commits**: 100-row upserts into one table, with 1 writer (median latency, commits/s) and 8
  writer processes started before the clock (commits/s over all of them), on each metastore:
  SQLite (embedded), the object-store WAL on a local directory and on S3 (moto), PostgreSQL
  (a private durable cluster), and `conch serve` over SQLite on loopback.
- **Scans** of the spec/001 audio table (20 KB blobs): the spec/001 scan (`audio.bytes where
  silence_ratio < 0.01`) and a full scan, from local disk and from S3 (moto), with the bytes the
  scan read from storage (counted under the storage protocol) against the bytes it returned;
  Lance on the same S3 store for comparison.
- **Spark ingest** (local[2]) of the demo's audio dataset (Parquet) with the demo's ingest, into
  the embedded default, into S3 through the HTTP metastore (`conch serve` on S3), and into S3 with
  the object-store WAL.

moto is a single-process Python S3 server on loopback: its numbers show the request pattern's
cost (round trips, bytes), not a real object store's latency. Services are started here (the
same helpers the tests use) and stopped at the end. Writes bench/results/backends.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

import conch
from bench import systems as S
from conch.files.storage.base import FileInfo, RangeReader, Storage
from conch.log.warehouse import Warehouse

sys.path.insert(0, str(Path(__file__).parents[1] / "tests"))
from services import ServerProcess, moto_server, postgres_server

RESULTS = Path(__file__).parent / "results"
TOKEN = "bench-admin-token"


# --- counting bytes under the storage protocol -------------------------------------------------


class _CountingReader:
    def __init__(self, inner: RangeReader, counter: list[int]) -> None:
        self._inner, self._counter = inner, counter

    def size(self) -> int:
        return self._inner.size()

    def read_at(self, offset: int, length: int) -> bytes:
        data = self._inner.read_at(offset, length)
        self._counter[0] += len(data)
        return data

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        parts = self._inner.read_ranges(ranges)
        self._counter[0] += sum(len(p) for p in parts)
        return parts

    def close(self) -> None:
        self._inner.close()


class CountingStorage:
    """A storage that counts the bytes read through it (every backend alike)."""

    def __init__(self, inner: Storage) -> None:
        self.inner = inner
        self.counter = [0]

    @property
    def uri(self) -> str:
        return self.inner.uri

    def open(self, path: str) -> RangeReader:
        return _CountingReader(self.inner.open(path), self.counter)

    def read(self, path: str) -> bytes:
        data = self.inner.read(path)
        self.counter[0] += len(data)
        return data

    def write(self, path: str, data: bytes | bytearray | memoryview) -> None:
        self.inner.write(path, data)

    def create(self, path: str, data: bytes | bytearray | memoryview) -> bool:
        return self.inner.create(path, data)

    def staged(self, path: str) -> contextlib.AbstractContextManager[str]:
        return self.inner.staged(path)

    def exists(self, path: str) -> bool:
        return self.inner.exists(path)

    def size(self, path: str) -> int:
        return self.inner.size(path)

    def delete(self, path: str) -> None:
        self.inner.delete(path)

    def list(self, prefix: str = "") -> Iterator[FileInfo]:
        return self.inner.list(prefix)

    def delete_prefix(self, prefix: str) -> None:
        self.inner.delete_prefix(prefix)


# --- commits -----------------------------------------------------------------------------------


def _batch(rng: np.random.Generator, rows: int) -> pa.Table:
    return pa.table({"id": rng.choice(10_000_000, rows, replace=False), "v": rng.random(rows)})


def _connect(target: dict[str, Any]) -> conch.Catalog:
    """The target warehouse, without automatic compaction: this measures the metastores' commits."""
    return conch.connect(
        target["uri"],
        metastore=target.get("metastore"),
        token=target.get("token"),
        storage_options=target.get("so"),
        maintenance=conch.Policy(auto=False),
    )


def _commit_loop(target: dict[str, Any], commits: int, seed: int) -> list[float]:
    t = _connect(target).table("t")
    rng = np.random.default_rng(seed)
    lat = []
    for _ in range(commits):
        data = _batch(rng, 100)
        t0 = time.perf_counter()
        t.write(data)
        lat.append(time.perf_counter() - t0)
    return lat


def _writer(target: dict[str, Any], commits: int, seed: int, ready: Any, go: Any, out: Any) -> None:
    _connect(target)  # imports and connections before the clock starts
    ready.put(seed)
    go.wait()
    out.put(_commit_loop(target, commits, seed))


def bench_commits(target: dict[str, Any], commits: int, writers: int) -> dict[str, Any]:
    cat = _connect(target)
    with contextlib.suppress(conch.TableNotFoundError):
        cat.drop_table("t")
    cat.create_table("t", [("id", pa.int64())], pa.schema([("v", pa.float64())]))
    if writers == 1:
        t0 = time.perf_counter()
        lat = _commit_loop(target, commits, 0)
        wall = time.perf_counter() - t0
    else:
        ctx = multiprocessing.get_context("spawn")
        ready, go, out = ctx.Queue(), ctx.Event(), ctx.Queue()
        per = max(commits // writers, 1)
        procs = [ctx.Process(target=_writer, args=(target, per, w, ready, go, out)) for w in range(writers)]
        for p in procs:
            p.start()
        for _ in procs:  # every writer has imported and connected
            ready.get()
        t0 = time.perf_counter()
        go.set()
        lat = [x for _ in procs for x in out.get()]
        wall = time.perf_counter() - t0
        for p in procs:
            p.join()
    n = len(lat)
    assert len(cat.table("t").history()) == n, "a commit was lost"
    return {
        "commits": n,
        "writers": writers,
        "median_ms": round(statistics.median(lat) * 1000, 2),
        "p90_ms": round(float(np.percentile(lat, 90)) * 1000, 2),
        "commits_per_s": round(n / wall, 1),
    }


# --- scans -------------------------------------------------------------------------------------


def _audio(rows: int) -> tuple[pa.Table, pa.Table]:
    data = S.audio_table(rows, 20_000)
    meta = data.select(["id", "silence_ratio", "audio_length"])
    audio = pa.StructArray.from_arrays([data.column("audio_bytes").combine_chunks().cast(pa.binary())], ["bytes"])
    return meta, pa.table({"id": data.column("id"), "audio": audio})


def bench_scans(uri: str, options: dict[str, Any] | None, rows: int, reps: int) -> list[dict[str, Any]]:
    cat = conch.connect(uri, storage_options=options)
    t = cat.create_table("audio", [("id", pa.uint64())])
    meta, audio = _audio(rows)
    t.write(meta)
    t.write(audio)
    out = []
    for case, make in (
        (
            "spec/001 audio.bytes where silence<0.01",
            lambda c, tt: c.scan(tt["audio.bytes"], where=tt["silence_ratio"] < 0.01),
        ),
        ("full scan", lambda c, tt: tt.scan()),
    ):
        counting = CountingStorage(cat.warehouse.storage)
        cold = conch.Catalog(Warehouse(counting, cat.warehouse.metastore))  # fresh caches: every byte from storage
        tt = cold.table("audio")
        result = make(cold, tt).to_arrow()
        read = counting.counter[0]
        returned = result.nbytes
        secs, _ = S.timed(lambda c=cold, x=tt, m=make: m(c, x).to_arrow(), reps)
        out.append(
            {
                "case": case,
                "storage": uri.split("://")[0] if "://" in uri else "local",
                "system": "conch",
                "ms": round(secs * 1000, 1),
                "rows": result.num_rows,
                "bytes_read": read,
                "bytes_returned": returned,
                "read_over_returned": round(read / max(returned, 1), 3),
            }
        )
    return out


def bench_lance(uri: str, options: dict[str, Any], rows: int, reps: int) -> list[dict[str, Any]]:
    try:
        import lance
    except ImportError:
        return []
    data = S.audio_table(rows, 20_000).cast(
        pa.schema(
            [
                ("id", pa.uint64()),
                ("silence_ratio", pa.float64()),
                ("audio_length", pa.float64()),
                ("audio_bytes", pa.large_binary()),
            ]
        )
    )
    so = {
        "aws_endpoint": options["endpoint"],
        "aws_access_key_id": options["access_key_id"],
        "aws_secret_access_key": options["secret_access_key"],
        "aws_region": options["region"],
        "allow_http": "true",
    }
    lance.write_dataset(data, f"{uri}/lance", storage_options=so)
    ds = lance.dataset(f"{uri}/lance", storage_options=so)
    out = []
    for case, fn in (
        (
            "spec/001 audio.bytes where silence<0.01",
            lambda: ds.to_table(columns=["id", "audio_bytes"], filter="silence_ratio < 0.01"),
        ),
        ("full scan", lambda: ds.to_table()),
    ):
        secs, got = S.timed(fn, reps)
        out.append(
            {
                "case": case,
                "storage": "s3",
                "system": "lance",
                "ms": round(secs * 1000, 1),
                "rows": got.num_rows,
                "bytes_returned": got.nbytes,
            }
        )
    return out


def bench_spark_ingest(s3: Any, local: Path, rows: int, reps: int, work: Path) -> list[dict[str, Any]]:
    """The demo's Spark ingest (`conch.apps.pipelines.ingest`, local[2], range-partitioned, one commit)
    of the demo's audio dataset (generated Parquet, 2–30 KB blobs) into the embedded default, into
    S3 through the HTTP metastore (`conch serve` on S3), and into S3 with the object-store WAL.
    The targets take turns within each repetition (a loaded machine slows all alike); median."""
    try:
        import conch.engines.spark
    except ImportError:
        return []
    from rich.console import Console

    from conch.apps.pipelines.demo import generate_parquet
    from conch.apps.pipelines.generate import AUDIO_SCHEMA
    from conch.apps.pipelines.ingest import ingest
    from conch.engines.spark.common import Location

    src = work / "demo-input"
    nbytes = generate_parquet(str(src), rows, files=4, console=Console(stderr=True))
    so = json.dumps(s3.options)
    server = ServerProcess(s3.uri("spark-http"), {TOKEN: "admin"}, env=s3.env).start()
    targets = {
        "local (embedded)": {"warehouse": str(local)},
        "s3 via http metastore": {"warehouse": server.url, "token": TOKEN, "storageOptions": so},
        "s3 (object-store WAL)": {"warehouse": s3.uri("spark-wal"), "storageOptions": so},
    }
    spark = conch.engines.spark.session("conch-bench-backends")
    secs: dict[str, list[float]] = {name: [] for name in targets}
    try:
        for rep in range(reps + 1):  # repetition 0 warms up the JVM, Python workers and caches
            for name, opts in targets.items():
                table = f"audio{rep}"
                cat = Location.from_options({**opts, "table": table}).connect()
                cat.create_table(table, [("id", pa.uint64())], pa.schema(list(AUDIO_SCHEMA)[1:]))
                extra = {k: v for k, v in opts.items() if k != "warehouse"}
                t0 = time.perf_counter()
                res = ingest(spark, str(src), opts["warehouse"], table, key=["id"], partitions=4, options=extra)
                dt = time.perf_counter() - t0
                assert res.rows == rows, f"{name}: ingested {res.rows} of {rows} rows"
                if rep:
                    secs[name].append(dt)
    finally:
        spark.stop()
        server.stop()
    out = []
    base = statistics.median(secs["local (embedded)"])
    print(f"\nSpark ingest of the demo dataset: {rows} rows, {nbytes / 1e6:.1f} MB of Parquet, median of {reps}")
    print(f"{'target':<24} {'seconds':>8} {'MB/s':>8} {'vs embedded':>12}")
    for name, times in secs.items():
        med = statistics.median(times)
        r = {
            "target": name,
            "rows": rows,
            "input_mb": round(nbytes / 1e6, 1),
            "seconds": round(med, 2),
            "all_seconds": [round(x, 2) for x in times],
            "mb_per_s": round(nbytes / 1e6 / med, 1),
            "vs_embedded": round(med / base, 2),
        }
        out.append(r)
        print(f"{name:<24} {med:>8.2f} {r['mb_per_s']:>8} {r['vs_embedded']:>11}x", flush=True)
    return out


# --- driver ------------------------------------------------------------------------------------


def run(
    commits: int = 40, rows: int = 5000, reps: int = 3, only: tuple[str, ...] = ("commits", "scans")
) -> dict[str, Any]:
    """Start the services, run the benchmarks, print tables; returns the results document."""
    doc: dict[str, Any] = {"commits": [], "scans": [], "spark_ingest": []}
    work = Path(tempfile.mkdtemp(prefix="conch-bench-backends-"))
    with moto_server() as s3, postgres_server(durable=True) as pg:
        server = ServerProcess(str(work / "http-wh"), {TOKEN: "admin"}).start()
        try:
            targets = {
                "sqlite": {"uri": str(work / "sqlite")},
                "objectstore-local": {"uri": str(work / "objlocal"), "metastore": "storage"},
                "objectstore-s3": {"uri": s3.uri("commits"), "so": s3.options},
                "postgres": {"uri": str(work / "pg"), "metastore": pg.dsn()},
                "http": {"uri": server.url, "token": TOKEN},
            }
            if "commits" in only:
                print(
                    f"{'metastore':<18} {'writers':>7} {'commits':>7} {'median ms':>10} {'p90 ms':>8} {'commits/s':>10}"
                )
                for name, target in targets.items():
                    for writers in (1, 8):
                        r = {"metastore": name, **bench_commits(target, commits, writers)}
                        doc["commits"].append(r)
                        print(
                            f"{name:<18} {writers:>7} {r['commits']:>7} {r['median_ms']:>10} {r['p90_ms']:>8} {r['commits_per_s']:>10}",
                            flush=True,
                        )
            if "scans" in only:
                doc["scans"] += bench_scans(str(work / "scan-local"), None, rows, reps)
                doc["scans"] += bench_scans(s3.uri("scans"), s3.options, rows, reps)
                doc["scans"] += bench_lance(s3.uri("lance"), s3.options, rows, reps)
                print(
                    f"\n{'case':<42} {'storage':<7} {'system':<6} {'ms':>9} {'rows':>6} {'read B':>12} {'returned B':>12} {'read/ret':>8}"
                )
                for r in doc["scans"]:
                    print(
                        f"{r['case']:<42} {r['storage']:<7} {r['system']:<6} {r['ms']:>9} {r['rows']:>6} "
                        f"{r.get('bytes_read', '-'):>12} {r['bytes_returned']:>12} {r.get('read_over_returned', '-'):>8}"
                    )
            if "spark" in only:
                doc["spark_ingest"] = bench_spark_ingest(s3, work / "spark-local", rows, reps, work)
        finally:
            server.stop()
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.backends", description=__doc__)
    ap.add_argument("--commits", type=int, default=40, help="commits per measurement (split over 8 writers)")
    ap.add_argument("--rows", type=int, default=5000, help="rows of the audio table (20 KB blobs)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="commits,scans,spark")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    doc = run(args.commits, args.rows, args.reps, tuple(args.only.split(",")))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "backends.json").write_text(json.dumps(doc, indent=1))
    print(f"\nwrote {args.out / 'backends.json'}")


if __name__ == "__main__":
    main()
