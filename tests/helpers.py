"""Small helpers shared by tests."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa

import conch
from conch.files.storage import LocalStorage


def local_path(storage: LocalStorage, rel: str) -> str:
    """Where a stored file lives on disk, for tests that damage or inspect files directly."""
    return os.path.join(storage.uri, rel)


def engine_table(path: Path, struct_b: Callable[[int], object]) -> conch.Table:
    """The table the engine-pushdown tests (Polars, DuckDB) query: 300 keys with floats (NaN and
    null among them), strings with nulls, a struct `g` (`g.b` from `struct_b(i)`), then a second,
    overlapping run rewriting `x` for every third key from 250 on."""
    t = conch.connect(path).create_table("t", [("id", pa.int64())])
    xs = [math.nan if i % 17 == 0 else (None if i % 11 == 0 else (i - 100) / 10) for i in range(300)]
    t.write(
        {
            "id": list(range(300)),
            "x": pa.array(xs, pa.float64()),
            "s": [f"s{i % 7}" if i % 5 else None for i in range(300)],
            "g": [{"a": i % 4, "b": struct_b(i)} for i in range(300)],
        }
    )
    t.write({"id": list(range(250, 400, 3)), "x": pa.array([1.5] * 50, pa.float64())})
    return t


def realign(table: Any, level: str = "", split_seed: int | None = None, runs: int | None = None) -> Any:
    """Minor compaction by hand (what issue 10's minor compaction commits, built from public
    parts): the newest `runs` data key spaces of `level` (default: all) become one new key space
    holding their merged keys, with the newest one's time, and every fragment's data file is
    reused through a mask file (`conch.files.masks.write_mask`) keeping exactly the fresh cells it
    holds: sparse where a run's keys interleave with another's, masked where a newer write made
    some of its cells stale (then the columns of one file may split into several fragments
    sharing it). With `split_seed`, every new fragment of more than one row is dealt at random
    into two fragments sharing its file (interleaved masks). The level must have no tombstones.
    Commits one entry of kind "compact" and returns its `Commit`. Vectorised (benchmarks use it).
    """
    import numpy as np

    from conch.files.manifest import Fragment, KeySpace
    from conch.files.masks import MASK_SUFFIX, write_mask
    from conch.files.storage import new_id
    from conch.log.wal import AddFragment, AddKeySpace, RemoveFragment, RemoveKeySpace, Transaction
    from conch.maintain.compaction.minor import fresh_cells, merge_keys

    log = table.log
    state = log.state()
    files = log.files
    fmt, storage = files.format, files.storage
    fields = state.schema.key_fields(level)
    kss = sorted((k for k in state.key_spaces.values() if k.level == level), key=lambda k: (k.time, k.seq))
    assert all(k.kind == "data" for k in kss), "realign: the level must have no tombstones"
    kss = kss[-runs:] if runs else kss
    if not kss:
        return None
    keys, merged, encs = merge_keys(fmt, kss, fields)
    ks_id = new_id()
    path = files.key_space_path(ks_id)
    written = fmt.write(keys, path)
    new_ks = KeySpace(
        id=ks_id, level=level, path=path, rows=len(merged), min_key=merged[0].as_py().hex(),
        max_key=merged[-1].as_py().hex(), time=kss[-1].time, bytes=written.bytes, checksum=written.checksum,
    )  # fmt: skip
    # the fresh cell of every (column, merged key): the newest run's fragment holding it
    ids = {k.id for k in kss}
    frs = sorted((f for f in state.fragments.values() if f.key_space in ids), key=lambda f: f.id)
    assert all(not f.mask for f in frs), "realign: sources must be dense"
    rng = np.random.default_rng(split_seed)
    ops: list[Any] = [RemoveKeySpace(k.id) for k in kss] + [RemoveFragment(f.id) for f in frs]
    ops.append(AddKeySpace(new_ks))
    written_files = [path]
    for j, cols, positions, file_rows in fresh_cells(kss, encs, merged, frs):
        src = frs[j]
        parts = [np.ones(len(positions), dtype=bool)]
        if split_seed is not None and len(positions) > 1:
            pick = rng.random(len(positions)) < 0.5
            pick[0], pick[-1] = True, False
            parts = [pick, ~pick]
        for sel in parts:
            mask_path = f"{table.id}/masks/{new_id()}{MASK_SUFFIX}"
            m = write_mask(storage, mask_path, positions[sel], file_rows[sel])
            written_files.append(mask_path)
            fr = Fragment(
                id=new_id(), level=level, group=src.group, key_space=ks_id, start=int(positions[sel][0]),
                rows=int(sel.sum()), path=src.path, column_ids=tuple(cols), stats=src.stats,
                bytes=src.bytes, time=src.time, checksum=src.checksum, blob_columns=src.blob_columns,
                mask=mask_path, mask_checksum=m.checksum,
            )  # fmt: skip
            ops.append(AddFragment(fr))
    txn = Transaction("compact", tuple(ops), summary="realign (test)", base_seq=state.seq, files=tuple(written_files))
    return log.commit(txn)


def upsert_random(t: conch.Table, model: dict[int, int], rng: Any, n: int, keys: int = 400) -> None:
    """Write `n` random keys of `range(keys)` with random `v` values (int64 key `id`), and record
    them in `model` (key -> v): the upsert of the background maintenance tests."""
    ids = sorted(rng.sample(range(keys), n))
    vals = [rng.randint(0, 10**6) for _ in ids]
    t.write(pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array(vals, pa.int64())}))
    model.update(zip(ids, vals, strict=True))


def id_to_v(t: conch.Table) -> dict[int, int]:
    """The table's fresh records as key -> v (the model `upsert_random` keeps)."""
    got = t.scan().to_arrow()
    return dict(zip(got.column("id").to_pylist(), got.column("v").to_pylist(), strict=True))


def run_cli(warehouse: str | Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`conch --warehouse W ARGS...` in a subprocess, with a wide, minimal environment (tables
    render at 200 columns; nothing from the caller's environment leaks in). The subprocess
    imports the `conch` this process imported (a checkout's src/ before an installed copy)."""
    return subprocess.run(
        [sys.executable, "-m", "conch.apps.cli", "--warehouse", str(warehouse), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(Path(conch.__file__).parents[1])},
    )


class CountingMetastore:
    """A metastore that counts the calls made to it (every one is a round trip on a server,
    PostgreSQL or an object store)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr) or name == "close":
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return call

    def take(self) -> int:
        """The calls counted since the last `take`."""
        n = sum(self.calls.values())
        self.calls.clear()
        return n


CLUSTER_JOB = Path(__file__).parent / "engines" / "cluster_job.py"


def run_spark_job(job: str, targets: list[dict[str, Any]], driver_cwd: Path) -> Any:
    """Run the `job` of `engines/cluster_job.py` (`write` or `read`) as its own driver process in `driver_cwd`, with
    the `conch` under test on its path and no `AWS_*` variables (only the targets' options reach
    S3); returns the JSON its last output line holds."""
    driver_cwd.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(conch.__file__).parents[1]), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, str(CLUSTER_JOB), job, json.dumps(targets)],
        cwd=driver_cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@dataclass(frozen=True)
class Warehouse:
    """How to connect to one test warehouse (picklable: writer processes and pool workers connect
    with it). `kind` names the backend in suites parametrised over them."""

    uri: str
    metastore: Any = None  # a URI, or a Metastore object (an in-process server)
    token: str | None = None
    storage_options: dict[str, Any] = field(default_factory=dict)
    kind: str = ""

    def connect(self, maintenance: conch.Policy | None = None) -> conch.Catalog:
        return conch.connect(
            self.uri,
            metastore=self.metastore,
            token=self.token,
            storage_options=self.storage_options or None,
            maintenance=maintenance,
        )
