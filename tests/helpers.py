"""Small helpers shared by tests."""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa

import conch
from conch.storage import LocalStorage


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
def realign(table: Any, level: str = "", split_seed: int | None = None) -> Any:
    """Minor compaction by hand (what issue 10's minor compaction commits, built from public
    parts): every data key space of `level` becomes one new key space holding the merged keys,
    and every fragment's data file is reused through a mask file (`conch.masks.write_mask`)
    that keeps exactly the fresh cells it holds: sparse where a run's keys interleave with
    another's, masked where a partial upsert made some of its cells stale (then the columns of
    one file split into several fragments sharing it). With `split_seed`, every new fragment
    of more than one row is dealt at random into two fragments sharing its file (interleaved
    masks). The level must have no tombstones. Commits one entry of kind "compact"; returns it.
    """
    import numpy as np
    import pyarrow as pa

    from conch.keys import encode_keys
    from conch.manifest import Fragment, KeySpace
    from conch.masks import MASK_SUFFIX, write_mask
    from conch.storage import new_id
    from conch.wal import AddFragment, AddKeySpace, RemoveFragment, RemoveKeySpace, Transaction

    log = table.log
    state = log.state()
    files = log.files
    fmt, storage = files.format, files.storage
    fields = state.schema.key_fields(level)
    names = [f"k{i}" for i in range(len(fields))]
    kschema = pa.schema([(n, f.type) for n, f in zip(names, fields, strict=True)])
    kss = sorted((k for k in state.key_spaces.values() if k.level == level), key=lambda k: (k.time, k.seq))
    assert all(k.kind == "data" for k in kss), "realign: the level must have no tombstones"
    if not kss:
        return None
    key_tables = [fmt.read(k, names, kschema) for k in kss]
    encs = [encode_keys(t.columns).to_pylist() for t in key_tables]
    merged = sorted(set().union(*encs))
    at = {e: i for i, e in enumerate(merged)}
    allkeys = pa.concat_tables(key_tables)
    first: dict[bytes, int] = {}
    for i, e in enumerate(e for es in encs for e in es):
        first.setdefault(e, i)
    keys = allkeys.take(pa.array([first[e] for e in merged]))
    ks_id = new_id()
    path = files.key_space_path(ks_id)
    written = fmt.write(keys, path)
    new_ks = KeySpace(
        id=ks_id, level=level, path=path, rows=len(merged), min_key=merged[0].hex(), max_key=merged[-1].hex(),
        time=kss[-1].time, bytes=written.bytes, checksum=written.checksum,
    )  # fmt: skip
    # the fresh cell of every (column, merged key): the newest key space's fragment holding it
    owner: dict[int, dict[int, tuple[str, int]]] = {}  # column id → merged row → (fragment id, its row)
    frs = {f.id: f for f in state.fragments.values() if f.level == level}
    for k, es in zip(kss, encs, strict=True):
        pos = np.array([at[e] for e in es], dtype=np.int64)
        for f in sorted((f for f in frs.values() if f.key_space == k.id), key=lambda f: f.start):
            assert not f.mask, "realign: sources must be dense"
            for c in f.column_ids:
                cells = owner.setdefault(c, {})
                for r in range(f.rows):
                    cells[int(pos[f.start + r])] = (f.id, r)
    # per source fragment, its columns grouped by the merged rows they are fresh at
    by: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    for c, cells in owner.items():
        for fid in {v[0] for v in cells.values()}:
            rows = tuple(sorted(p for p, v in cells.items() if v[0] == fid))
            by.setdefault((fid, rows), []).append(c)
    rng = np.random.default_rng(split_seed)
    ops: list[Any] = [RemoveKeySpace(k.id) for k in kss] + [RemoveFragment(f) for f in frs]
    ops.append(AddKeySpace(new_ks))
    written_files = [path]
    for (fid, rows), cols in sorted(by.items()):
        src = frs[fid]
        positions = np.array(rows, dtype=np.int64)
        file_rows = np.array([owner[cols[0]][p][1] for p in rows], dtype=np.int64)
        parts = [np.ones(len(rows), dtype=bool)]
        if split_seed is not None and len(rows) > 1:
            pick = rng.random(len(rows)) < 0.5
            pick[0], pick[-1] = True, False
            parts = [pick, ~pick]
        for sel in parts:
            mask_path = f"{table.id}/masks/{new_id()}{MASK_SUFFIX}"
            m = write_mask(storage, mask_path, positions[sel], file_rows[sel])
            written_files.append(mask_path)
            fr = Fragment(
                id=new_id(), level=level, group=src.group, key_space=ks_id, start=int(positions[sel][0]),
                rows=int(sel.sum()), path=src.path, column_ids=tuple(sorted(cols)), stats=src.stats,
                bytes=src.bytes, time=src.time, checksum=src.checksum, blob_columns=src.blob_columns,
                mask=mask_path, mask_checksum=m.checksum,
            )  # fmt: skip
            ops.append(AddFragment(fr))
    txn = Transaction("compact", tuple(ops), summary="realign (test)", base_seq=state.seq, files=tuple(written_files))
    return log.commit(txn)
