"""The systems under test, each behind the same small set of calls, and the data generators."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from statistics import median
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

TUNED_ROW_GROUP = 16_384  # tuned Parquet: small row groups (+ page index) for selective reads


def timed(fn: Callable[[], Any], reps: int, warmup: bool = True) -> tuple[float, Any]:
    """Median wall time over `reps` runs after one warm-up run (warm page cache)."""
    out = fn() if warmup else None
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return median(times), out


def interleaved(a: Callable[[], Any], b: Callable[[], Any], reps: int) -> tuple[float, float, Any, Any]:
    """Median wall times of `a` and `b`, run alternately (a, b, a, b, ...) after one warm-up
    each, so a burst of load on a shared machine hits both; and their last outputs."""
    out_a, out_b = a(), b()
    ta, tb = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        out_a = a()
        ta.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        out_b = b()
        tb.append(time.perf_counter() - t0)
    return median(ta), median(tb), out_a, out_b


def alternated_reads(
    mine: Any, base: Any, queries: dict[str, Callable[[Any], pa.Table]], reps: int
) -> dict[str, tuple[float, float, pa.Table, pa.Table]]:
    """Each query of `queries` on `mine` and on `base` (two tables), alternated rep by rep
    (`interleaved`): case → (median seconds of `mine`, of `base`, their last outputs)."""
    out = {}
    for case, q in queries.items():
        out[case] = interleaved(lambda q=q: q(mine), lambda q=q: q(base), reps)
    return out


def write_results(out_dir: Path, name: str, args: Any, rows: list[dict[str, Any]], started: float) -> Path:
    """A benchmark's results file `out_dir/name`: the machine (`machine`), its arguments (but
    the internal `--child`), the seconds since `started` (`perf_counter`) and its rows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "machine": machine(),
        "args": {k: str(v) for k, v in vars(args).items() if k != "child"},
        "seconds": round(time.perf_counter() - started, 1),
        "rows": rows,
    }
    (out_dir / name).write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out_dir / name}")
    return out_dir / name


def process_cpu() -> float:
    """CPU seconds of this process so far, every thread (Vortex's encoders run on their own)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def child_json(module: str, args: list[str], env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `python -m <module> --child <args>` in a fresh process (its own peak RSS) and return
    the JSON object its last output line holds. `env`: variables replacing this process's (a
    `PYTHONPATH` naming another checkout measures that code beside this one)."""
    cmd = [sys.executable, "-m", module, "--child", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def rchar() -> int:
    """Bytes this process has read through read syscalls (page cache included)."""
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def dir_size(p: Path) -> int:
    if p.is_file():
        return p.stat().st_size
    return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def fresh(p: Path) -> Path:
    if p.exists():
        shutil.rmtree(p) if p.is_dir() else p.unlink()
    p.parent.mkdir(parents=True, exist_ok=True)
    return p


# ----- data ---------------------------------------------------------------------------------------
def strings(rng: np.random.Generator, n: int, width: int) -> pa.Array:
    """n distinct-ish random ASCII strings of exactly `width` bytes, built without Python loops."""
    data = rng.integers(97, 123, size=n * width, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int64) * width
    return pa.Array.from_buffers(pa.large_string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)]).cast(
        pa.string()
    )


def metadata_table(n: int, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed)
    cats = np.array([f"category-{i:03d}" for i in range(200)])
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.uint64)),
            "f0": rng.random(n),
            "f1": rng.normal(size=n),
            "f2": rng.random(n) * 1000,
            "s0": strings(rng, n, 12),
            "s1": pa.array(cats[rng.integers(0, 200, n)]),
        }
    )


def audio_table(n: int, blob: int, seed: int = 1) -> pa.Table:
    rng = np.random.default_rng(seed)
    data = rng.integers(0, 256, size=n * blob, dtype=np.uint8)
    offsets = np.arange(n + 1, dtype=np.int64) * blob
    blobs = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    return pa.table(
        {
            "id": pa.array(np.arange(n, dtype=np.uint64)),
            "silence_ratio": rng.random(n),
            "audio_length": rng.random(n) * 60,
            "audio_bytes": blobs,
        }
    )


def wide_table(n: int, cols: int, seed: int = 2) -> pa.Table:
    rng = np.random.default_rng(seed)
    d: dict[str, Any] = {"id": pa.array(np.arange(n, dtype=np.uint64))}
    for i in range(cols):
        d[f"c{i}"] = rng.random(n)
    return pa.table(d)


# ----- per-system helpers ---------------------------------------------------------------------------
def parquet_write(t: pa.Table, path: Path, tuned: bool) -> None:
    if tuned:
        pq.write_table(t, path, row_group_size=TUNED_ROW_GROUP, write_page_index=True, compression="zstd")
    else:
        pq.write_table(t, path)


def parquet_read(path: Path, columns: list[str] | None = None, filters: Any = None) -> pa.Table:
    return pq.read_table(path, columns=columns, filters=filters)


def write_take_copies(t: pa.Table, root: Path) -> tuple[Path, Path, Any]:
    """The competitors' copies of `t` for the take workloads (4, 5): Parquet default, Parquet tuned
    for takes (1k-row row groups + page index), Lance and Delta. Returns the two Parquet paths and
    the Lance dataset."""
    default, tuned = root / "default.parquet", root / "tuned.parquet"
    parquet_write(t, fresh(default), tuned=False)
    pq.write_table(t, fresh(tuned), row_group_size=1024, write_page_index=True)
    lance_ds = lance_write(t, root / "lance")
    delta_write(t, root / "delta")
    return default, tuned, lance_ds


def lance_write(t: pa.Table, path: Path) -> Any:
    import lance

    return lance.write_dataset(t, str(fresh(path)))


def delta_write(t: pa.Table, path: Path) -> None:
    from deltalake import write_deltalake

    write_deltalake(str(fresh(path)), t)


def delta_read(path: Path, columns: list[str] | None = None, filt: Any = None) -> pa.Table:
    from deltalake import DeltaTable

    return DeltaTable(str(path)).to_pyarrow_dataset().to_table(columns=columns, filter=filt)


def duck(sql: str) -> pa.Table:
    import duckdb

    return duckdb.sql(sql).to_arrow_table()


def fs_cache_note() -> str:
    return "warm page cache (one warm-up run before timing); medians of repetitions"


def cpu_count() -> int:
    return os.cpu_count() or 1


def machine(cpus: int | None = None, **more: Any) -> dict[str, Any]:
    """What a results file records of the machine a benchmark ran on: cores (`cpus`, or all of
    them), platform, Python and the load average at the time (a shared machine's wall times are
    only comparable at a similar load), plus `more` (a device, a Spark master, ...)."""
    return {
        "cpus": cpus if cpus is not None else cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average": list(os.getloadavg()),
        **more,
    }


__all__ = ["pc"]
