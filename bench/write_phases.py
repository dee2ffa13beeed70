"""Where a Conch write's CPU goes, phase by phase (issues 24 and 25: the write throughput and
TPC-H loading goals): `python -m bench.write_phases [--tpch-sf 0.1] [--bulk-keys N]`; results in
`bench/results/write_phases.json`.

The write path's functions are wrapped with timers that charge each call's *thread* CPU time
(`time.thread_time`) to its phase, exclusive of the wrapped calls it makes, on whichever thread
runs it (Vortex encodes on the `conch-encode` pool), so the phases add up without double counting.
The process CPU time (`getrusage`, every thread, Vortex's own runtime threads included) is
measured around each write; what no phase claims is "other" (Vortex's runtime threads, input
conversion, Python glue). Parquet's write of the same Arrow data is measured beside it.

Workloads: the 8 TPC-H tables of `--tpch-sf` (bench/tpch.py's data, generated on first use), and
issue 24's bulk load (`--bulk-keys` u64 keys + 2 random f64 as a reader of `--batch-rows`).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

RESULTS = Path(__file__).parent / "results"


def _cpu() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


class Phases:
    """Exclusive thread-CPU and wall seconds per phase, across threads."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = defaultdict(float)
        self.wall: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self._local = threading.local()
        self._lock = threading.Lock()

    def wrap(self, phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            stack = self._local.__dict__.setdefault("stack", [])
            stack.append([0.0, 0.0])  # children's cpu, wall
            c0, w0 = time.thread_time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                c, w = time.thread_time() - c0, time.perf_counter() - w0
                kc, kw = stack.pop()
                if stack:
                    stack[-1][0] += c
                    stack[-1][1] += w
                with self._lock:
                    self.cpu[phase] += c - kc
                    self.wall[phase] += w - kw
                    self.calls[phase] += 1

        return timed

    @contextmanager
    def patched(self, targets: list[tuple[Any, str, str]]) -> Iterator[None]:
        saved = [(obj, name, getattr(obj, name)) for obj, name, _ in targets]
        try:
            for obj, name, phase in targets:
                setattr(obj, name, self.wrap(phase, getattr(obj, name)))
            yield
        finally:
            for obj, name, fn in saved:
                setattr(obj, name, fn)

    def reset(self) -> None:
        self.cpu.clear()
        self.wall.clear()
        self.calls.clear()


def targets() -> list[tuple[Any, str, str]]:
    """(object, attribute, phase) of every timed function of the write path."""
    import vortex

    import conch.api.table as table_mod
    import conch.files.fragments as fragments
    import conch.files.storage.local as local
    import conch.log.tablelog as tablelog
    import conch.model.keys as keys
    import conch.write.dedup as dedup
    import conch.write.inputs as inputs
    import conch.write.stage as stage

    out: list[tuple[Any, str, str]] = [
        (table_mod, "stage_write", "stage_write (rest)"),
        (stage, "read_input", "input"),
        (stage, "split_levels", "input"),
        (stage, "chunks", "input"),
        (stage, "validate_key_columns", "key validation/cast"),
        (stage, "strictly_increasing", "sortedness check"),
        (stage, "sort_indices", "sort"),
        (stage, "check_unique_sorted", "dedup within chunk"),
        (dedup.RunCheck, "check", "dedup across runs"),
        (stage, "partitions", "partitions (key encoding)"),
        (stage, "encode_keys", "key encoding (min/max)"),
        (stage, "write_run", "take/select (write_run)"),
        (stage, "_write_sorted_run", "value cast (_write_sorted_run)"),
        (stage, "write_groups", "fragment slicing/ops (write_groups)"),
        (fragments, "write_blobs", "blob files"),
        (fragments, "seal_file", "integrity digest"),
        (fragments, "column_stats", "stats"),
        (vortex.io, "write", "vortex encode+write"),
        (local, "_fsync", "fsync"),
        (tablelog.TableLog, "commit", "commit"),
        (table_mod.Table, "wait_for_maintenance", "maintenance wait"),
    ]
    for name in ("_write_batches",):
        if hasattr(inputs, name):
            out.append((inputs, name, "input"))
    del keys
    return out


def measure(label: str, fn: Callable[[], Any], phases: Phases | None) -> dict[str, Any]:
    c0, w0 = _cpu(), time.perf_counter()
    fn()
    cpu, wall = _cpu() - c0, time.perf_counter() - w0
    row: dict[str, Any] = {"workload": label, "cpu_s": round(cpu, 3), "wall_s": round(wall, 3)}
    if phases is not None:
        row["phases_cpu_s"] = {k: round(v, 3) for k, v in sorted(phases.cpu.items(), key=lambda kv: -kv[1])}
        row["phases_wall_s"] = {k: round(v, 3) for k, v in sorted(phases.wall.items(), key=lambda kv: -kv[1])}
        row["phases_cpu_s"]["other (unattributed)"] = round(cpu - sum(phases.cpu.values()), 3)
        phases.reset()
    return row


def tpch(sf: float, work: Path, phases: Phases) -> list[dict[str, Any]]:
    import conch
    from bench.tpch import KEYS, TABLES, dataset

    data_dir = dataset(Path("/tmp/conch-tpch"), sf, Path("/tmp/tpchgen"))
    shutil.rmtree(work, ignore_errors=True)
    (work / "pq").mkdir(parents=True)
    cat = conch.connect(work / "conch")
    tables = {n: pq.read_table(data_dir / f"{n}.parquet") for n in TABLES}
    rows = []

    def load_conch() -> None:
        for name, data in tables.items():
            key = [(k, data.schema.field(k).type) for k in KEYS[name]]
            values = pa.schema([f for f in data.schema if f.name not in KEYS[name]])
            t = cat.create_table(name, key, values)
            t.write(data)
            t.wait_for_maintenance()

    def load_parquet() -> None:
        for name, data in tables.items():
            pq.write_table(data, work / "pq" / f"{name}.parquet")

    rows.append(measure(f"tpch sf{sf:g} parquet", load_parquet, None))
    with phases.patched(targets()):
        phases.reset()
        rows.append(measure(f"tpch sf{sf:g} conch", load_conch, phases))
    shutil.rmtree(work, ignore_errors=True)
    return rows


def bulk(keys: int, batch_rows: int, work: Path, phases: Phases) -> list[dict[str, Any]]:
    import conch
    from bench.writes import SCHEMA, _reader

    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rows = []

    def parquet() -> None:
        with pq.ParquetWriter(work / "t.parquet", SCHEMA) as w:
            for b in _reader(keys, batch_rows):
                w.write_batch(b)

    def write() -> None:
        t = conch.connect(work / "conch").create_table("t", [("id", pa.uint64())])
        t.write(_reader(keys, batch_rows))
        t.wait_for_maintenance()

    def gen_only() -> None:
        for _ in _reader(keys, batch_rows):
            pass

    rows.append(measure(f"bulk {keys} input generation only", gen_only, None))
    rows.append(measure(f"bulk {keys} parquet", parquet, None))
    with phases.patched(targets()):
        phases.reset()
        rows.append(measure(f"bulk {keys} conch", write, phases))
    shutil.rmtree(work, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m bench.write_phases", description=__doc__.split("\n\n")[0])
    ap.add_argument("--tpch-sf", default="0.1", help="TPC-H scale factors to load ('' for none)")
    ap.add_argument("--bulk-keys", type=int, default=4_200_000, help="0: no bulk load")
    ap.add_argument("--batch-rows", type=int, default=350_000)
    ap.add_argument("--work", type=Path, default=Path("/tmp/conch-bench-write-phases"))
    ap.add_argument("--out", type=Path, default=RESULTS)
    a = ap.parse_args(argv)
    phases = Phases()
    rows: list[dict[str, Any]] = []
    for sf in [float(s) for s in a.tpch_sf.split(",") if s]:
        rows += tpch(sf, a.work, phases)
    if a.bulk_keys:
        rows += bulk(a.bulk_keys, a.batch_rows, a.work, phases)
    for r in rows:
        print(f"{r['workload']}: cpu {r['cpu_s']:.2f} s, wall {r['wall_s']:.2f} s")
        for k, v in r.get("phases_cpu_s", {}).items():
            print(f"    {k:<40} cpu {v:7.3f} s   wall {r['phases_wall_s'].get(k, 0):7.3f} s")
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "write_phases.json").write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
