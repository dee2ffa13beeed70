"""Minor compaction (spec/003): re-align a level's fragments to one merged key space through its
displacement map, reading keys only and rewriting no data file.

The newest `runs` data key spaces of a level (default: all; contiguous in commit time, as
DESIGN §6 requires) become one L1 key space holding their merged keys, with the newest input's
`time` and the oldest's as `min_time` (a `since` inside that window reads the retained originals,
`conch.log.sinceview`). Every fragment of the inputs keeps its data file: for each column, the merged
rows whose fresh cell it holds become a mask file (`conch.files.masks`): **sparse** where another run's
keys interleave, **masked** where a newer write made some of its cells stale (the columns of one
file then split into fragments that share it). The cost is reading and merging the key spaces
plus writing masks and a displacement map, never data bytes: large blob groups are re-aligned in
time proportional to their key count.

Refused (returns None) where a plain re-alignment would be wrong or pointless: tombstones on the
level or an ancestor (they hide cells by time, which merging runs would lose), fragments already
masked (a major compaction rewrites those), or fewer than two runs.

Commits one `compact` entry through the same compare-and-swap as writes: a blind write or delete
committed meanwhile stays newer (the output keeps its inputs' times), and losing to another
compaction of the same inputs is a `CommitConflictError` with nothing left but garbage for vacuum.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.files.format import FragmentFormat
from conch.files.manifest import Fragment, KeySpace, TableState
from conch.files.masks import MASK_SUFFIX, write_mask
from conch.files.storage import new_id
from conch.log.tablelog import TableLog
from conch.log.txn import Commit
from conch.log.wal import AddDisplacementMap, AddFragment, AddKeySpace, Op, RemoveFragment, RemoveKeySpace, Transaction
from conch.maintain.compaction.displacement import map_runs, write_map
from conch.maintain.compaction.timeorder import time_contiguous
from conch.model.keys import encode_keys
from conch.model.sets import distinct


@dataclass(frozen=True, slots=True)
class MinorResult:
    """What a minor compaction did: runs merged, fragments re-aligned and the masks it wrote."""

    commit: Commit
    runs_in: int
    rows_out: int
    fragments_in: int
    fragments_out: int
    mask_bytes: int
    map_bytes: int


def eligible(state: TableState, level: str, runs: int | None = None) -> list[KeySpace]:
    """The key spaces a minor compaction of `level` would merge (oldest first), or [] when it
    must not run (see the module doc)."""
    ancestors = {a.path for a in state.schema.ancestry(level)} | {level}
    if any(k.kind == "tombstone" and k.level in ancestors for k in state.key_spaces.values()):
        return []
    level_runs = sorted((k for k in state.key_spaces.values() if k.level == level), key=lambda k: (k.time, k.seq, k.id))
    kss = time_contiguous(level_runs[-runs:], level_runs) if runs else level_runs
    ids = {k.id for k in kss}
    if len(kss) < 2 or any(f.mask for f in state.fragments.values() if f.key_space in ids):
        return []
    return kss


def minor_compact(log: TableLog, level: str = "", runs: int | None = None) -> MinorResult | None:
    """Merge the newest `runs` key spaces of `level` (default all) into one, re-aligning every
    fragment through masks (see the module doc); None when there is nothing it may do."""
    state = log.state()
    kss = eligible(state, level, runs)
    if not kss:
        return None
    files = log.files
    fmt, storage = files.format, files.storage
    fields = state.schema.key_fields(level)
    keys, merged, encs = merge_keys(fmt, kss, fields)
    started_us = time.time_ns() // 1000
    ks_id = new_id()
    path = files.key_space_path(ks_id)
    written_files = [path]
    written = fmt.write(keys, path)
    new_ks = KeySpace(
        id=ks_id, level=level, path=path, rows=len(merged), min_key=merged[0].as_py().hex(),
        max_key=merged[-1].as_py().hex(), time=kss[-1].time, min_time=min(k.min_time or k.time for k in kss),
        lsm=1, compacted_at=started_us, bytes=written.bytes, checksum=written.checksum,
    )  # fmt: skip
    dmap = write_map(
        storage, log.files.table_id, [map_runs(k.id, e, [ks_id], [merged]) for k, e in zip(kss, encs, strict=True)]
    )
    written_files.append(dmap.path)
    ids = {k.id for k in kss}
    frs = sorted((f for f in state.fragments.values() if f.key_space in ids), key=lambda f: f.id)
    cells = fresh_cells(kss, encs, merged, frs)
    ops: list[Op] = [RemoveKeySpace(k.id) for k in kss]
    ops += [RemoveFragment(f.id) for f in frs]
    ops += [AddKeySpace(new_ks), AddDisplacementMap(dmap.path, dmap.bytes, dmap.checksum, dmap.runs)]
    mask_bytes = 0
    for j, cols, positions, file_rows in cells:
        src = frs[j]
        mask_path = f"{log.files.table_id}/masks/{new_id()}{MASK_SUFFIX}"
        m = write_mask(storage, mask_path, positions, file_rows)
        written_files.append(mask_path)
        mask_bytes += m.bytes
        fr = Fragment(
            id=new_id(), level=level, group=src.group, key_space=ks_id, start=int(positions[0]),
            rows=len(positions), path=src.path, column_ids=tuple(cols), stats=src.stats, bytes=src.bytes,
            time=kss[-1].time, lsm=1, compacted_at=started_us, checksum=src.checksum, blob_columns=src.blob_columns,
            mask=mask_path, mask_checksum=m.checksum,
        )  # fmt: skip
        ops.append(AddFragment(fr))
    txn = Transaction(
        "compact",
        tuple(ops),
        summary=f"minor: {len(kss)} runs of level {level or 'root'!r} → 1 (re-aligned, no data rewritten)",
        base_seq=state.seq,
        files=tuple(written_files),
        started_us=started_us,
    )
    commit = log.commit(txn)
    n_out = sum(1 for op in ops if isinstance(op, AddFragment))
    return MinorResult(commit, len(kss), len(merged), len(frs), n_out, mask_bytes, dmap.bytes)


def merge_keys(
    fmt: FragmentFormat, kss: list[KeySpace], fields: list[pa.Field]
) -> tuple[pa.Table, pa.Array, list[pa.Array]]:
    """The distinct keys of runs `kss` in key order (as a key table and encoded), and each run's
    encoded keys in its row order."""
    names = [f"k{i}" for i in range(len(fields))]
    kschema = pa.schema([(n, f.type) for n, f in zip(names, fields, strict=True)])
    key_tables = [fmt.read(k, names, kschema) for k in kss]
    encs = [encode_keys(t.columns) for t in key_tables]
    allenc = pa.chunked_array(encs).combine_chunks()
    order = np.asarray(pc.sort_indices(allenc))
    sorted_enc = allenc.take(pa.array(order))
    firsts = np.ones(len(order), dtype=bool)
    if len(order) > 1:
        firsts[1:] = np.asarray(pc.not_equal(sorted_enc.slice(1), sorted_enc.slice(0, len(order) - 1)))
    merged = sorted_enc.filter(pa.array(firsts))
    keys = pa.concat_tables(key_tables).take(pa.array(order[firsts]))
    return keys, merged, encs


def fresh_cells(
    kss: list[KeySpace], encs: list[pa.Array], merged: pa.Array, frs: list[Fragment]
) -> list[tuple[int, list[int], np.ndarray, np.ndarray]]:
    """Where every (column, merged row)'s fresh cell is: per source fragment `frs[j]`, its column
    ids grouped by the merged rows (positions) at which they are fresh, with the file rows
    holding them: `(j, column ids, positions, file rows)`. Runs are oldest first, so a newer
    run's fragment overrides an older one's cell."""
    owner: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # column id → (fragment index, file row) per merged row
    for k, enc in zip(kss, encs, strict=True):
        pos = np.asarray(pc.index_in(enc, value_set=merged), dtype=np.int64)
        for j, f in enumerate(frs):
            if f.key_space != k.id:
                continue
            for c in f.column_ids:
                fi, frow = owner.setdefault(c, (np.full(len(merged), -1), np.zeros(len(merged), dtype=np.int64)))
                p = pos[f.start : f.start + f.rows]
                fi[p] = j
                frow[p] = np.arange(f.rows)
    # Per source fragment, its columns grouped by the merged rows at which they are fresh.
    groups: dict[tuple[int, bytes], list[int]] = {}
    rows_of: dict[tuple[int, bytes], tuple[np.ndarray, np.ndarray]] = {}
    for c, (fi, frow) in sorted(owner.items()):
        for j in distinct(fi[fi >= 0]).tolist():
            p = np.flatnonzero(fi == j)
            key = (j, p.tobytes())
            groups.setdefault(key, []).append(c)
            rows_of[key] = (p, frow[p])
    return [(j, cols, *rows_of[(j, b)]) for (j, b), cols in sorted(groups.items())]
