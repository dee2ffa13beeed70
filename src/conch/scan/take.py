"""Step 4 of the general path: take the fresh values of read units at output key positions.

In batches of bounded bytes, exactly the fresh rows of the projected columns are read from each
fragment (a Vortex take by row index; blob columns read exactly the taken values). A fragment
that many batches need (overlapping LSM runs) is decoded once into the scan's byte-bounded cache
instead of once per batch, and a unit of many small runs that every batch needs is decoded whole
("resident") so that each batch costs one take.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from conch.files.format import column_name
from conch.files.manifest import Fragment
from conch.model.sets import distinct
from conch.scan.context import ScanContext, file_schema
from conch.scan.locate import ReadUnit

# fragment id → (fragment rows, ascending; their cells; the units (by id) they were read for)
Prefetched = dict[str, tuple[np.ndarray, pa.Table, set[int]]]


def prefetch(ctx: ScanContext, units: list[ReadUnit], positions: np.ndarray) -> Prefetched:
    """One read of each fragment that several units take rows from at output `positions`, of
    the union of their rows and columns. A partial upsert splits one group's columns into units
    by the runs holding them, and each unit took its rows from the large run in a Vortex read
    of its own (a fixed cost each: a 50-key take read the large run twice)."""
    want: dict[str, list[tuple[ReadUnit, np.ndarray]]] = {}
    frags: dict[str, Fragment] = {}
    for u in units:
        if u.resident is not None:
            continue
        schema = file_schema(u.columns)
        fk, rk = u.frag[positions], u.row[positions]
        for f, sel in split_by(fk):
            fr = u.fragments[f] if f >= 0 else None
            if fr is None or f in u.shared or len(sel) == fr.rows or ctx.hot(fr, schema) is not None:
                continue
            if ctx.small(u.group, fr, schema) is not None:  # decoded whole and kept: no read to share
                continue
            want.setdefault(fr.id, []).append((u, rk[sel]))
            frags[fr.id] = fr
    out: Prefetched = {}
    for fid, takes in want.items():
        if len(takes) < 2:
            continue
        rows = distinct(np.concatenate([r for _, r in takes]))
        cols = list({c.id: c for u, _ in takes for c in u.columns}.values())
        got = ctx.read_many(takes[0][0].group, [(frags[fid], rows)], file_schema(cols))
        out[fid] = (rows, got, {id(u) for u, _ in takes})
    return out


def gather(
    ctx: ScanContext, unit: ReadUnit, positions: np.ndarray, prefetched: Prefetched | None = None
) -> dict[int, pa.Array]:
    """Fresh values of a unit's columns at output key `positions` (sorted), in that order
    (`prefetched`: fragments read once for several units, `prefetch`)."""
    fk, rk = unit.frag[positions], unit.row[positions]
    schema = file_schema(unit.columns)
    if unit.resident is not None and unit.base is not None:
        idx = np.where(fk >= 0, unit.base[np.maximum(fk, 0)] + rk, unit.resident.num_rows - 1)
        got = unit.resident.take(pa.array(idx))
        return {c.id: got.column(column_name(c.id)).combine_chunks() for c in unit.columns}
    pieces: list[pa.Table] = []
    where: list[np.ndarray] = []
    takes: list[tuple[Fragment, np.ndarray]] = []  # partial takes: read together, one array per column
    take_sel: list[np.ndarray] = []
    for f, sel in split_by(fk):
        if f < 0:
            pieces.append(pa.table({n: pa.nulls(len(sel), t) for n, t in zip(schema.names, schema.types, strict=True)}))
            where.append(sel)
            continue
        fr = unit.fragments[f]
        rows = rk[sel]
        pre = prefetched.get(fr.id) if prefetched else None
        pre = pre if pre is not None and id(unit) in pre[2] else None
        hot = ctx.hot(fr, schema) if pre is None else None
        if pre is not None:
            t = pre[1].select(schema.names).take(pa.array(np.searchsorted(pre[0], rows)))
        elif hot is not None:  # a small run kept decoded across scans
            t = take_rows(hot, rows)
        elif len(rows) == fr.rows:
            t = ctx.read(unit.group, fr, schema)
        elif f in unit.shared:
            t = take_rows(ctx.read_decoded(unit.group, fr, schema), rows)
        else:
            takes.append((fr, rows))
            take_sel.append(sel)
            continue
        pieces.append(t)
        where.append(sel)
    if takes:
        pieces.append(ctx.read_many(unit.group, takes, schema))
        where.extend(take_sel)
    if not pieces:
        return {c.id: pa.nulls(0, c.type) for c in unit.columns}
    table = pa.concat_tables(pieces) if len(pieces) > 1 else pieces[0]
    if len(where) > 1:
        w = np.concatenate(where)
        if (w[1:] < w[:-1]).any():  # pieces out of output order: put them back
            table = table.take(pa.array(np.argsort(w, kind="stable")))
    return {c.id: one_array(table.column(column_name(c.id))) for c in unit.columns}


def one_array(col: pa.Array | pa.ChunkedArray) -> pa.Array:
    """A column as one array: its chunk when it has one (`combine_chunks` copies even then: 10 MB
    of blobs taken by a selective scan were copied once more)."""
    if isinstance(col, pa.Array):
        return col
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def batch_rows(ctx: ScanContext, units: list[ReadUnit]) -> int:
    """Output rows per batch: about `batch_bytes` of values (or the fixed `batch_rows` option)."""
    if ctx.options.batch_rows is not None:
        return ctx.options.batch_rows
    per_row = 0.0
    for u in units:
        rows = sum(f.rows for f in u.fragments) or 1
        per_row += sum(f.bytes for f in u.fragments) / rows
    return int(min(1 << 16, max(256, ctx.options.batch_bytes // max(per_row, 1.0))))


def plan_sharing(ctx: ScanContext, units: list[ReadUnit], positions: np.ndarray, step: int) -> None:
    """Mark fragments that several output batches take a large share of rows from (LSM runs
    that overlap in key range): they are decoded once, not once per batch."""
    if len(positions) <= step:
        return
    for u in units:
        if not u.fragments:
            continue
        nf = len(u.fragments)
        batches_touching = np.zeros(nf, dtype=np.int64)
        need = np.zeros(nf, dtype=np.int64)
        for start in range(0, len(positions), step):
            fk = u.frag[positions[start : start + step]]
            fk = fk[fk >= 0]
            if len(fk):
                counts = np.bincount(fk, minlength=nf)
                need += counts
                batches_touching += counts > 0
        rows = np.array([f.rows for f in u.fragments], dtype=np.int64)
        inline = np.array([not f.blob_columns for f in u.fragments], dtype=bool)
        share = (batches_touching > 1) & (need * 8 >= rows) & inline
        u.shared = set(np.nonzero(share)[0].tolist())
        if ctx.options.fast_paths and nf >= 8 and inline.all() and 2 * int((batches_touching > 1).sum()) >= nf:
            make_resident(ctx, u)


def make_resident(ctx: ScanContext, u: ReadUnit) -> None:
    """Decode all of a unit's fragments into one table (plus a null row for keys without a
    cell), if it fits the decoded-fragment budget: many small runs that every batch needs
    (an un-compacted LSM tree) then cost one take per batch instead of one per fragment."""
    schema = file_schema(u.columns)
    parts, total = [], 0
    for fr in u.fragments:
        t = ctx.read(u.group, fr, schema)
        total += t.nbytes
        if total > ctx.decoded.max_bytes:
            return
        parts.append(t)
    parts.append(pa.table({n: pa.nulls(1, t) for n, t in zip(schema.names, schema.types, strict=True)}))
    u.resident = pa.concat_tables(parts).combine_chunks()
    u.base = np.cumsum([0] + [p.num_rows for p in parts[:-1]])[:-1].astype(np.int64)
    ctx.group(u.group).decoded_whole += 1


def take_rows(t: pa.Table, rows: np.ndarray) -> pa.Table:
    """Rows of `t`; a zero-copy slice when they are contiguous (full and range scans)."""
    if len(rows) == t.num_rows:
        return t
    if len(rows) and rows[-1] - rows[0] + 1 == len(rows):
        return t.slice(int(rows[0]), len(rows))
    return t.take(pa.array(rows))


def split_by(fk: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(value, ascending indices holding it) for each distinct value of `fk`: one stable sort,
    not one scan per value (a scan can touch hundreds of fragments)."""
    if len(fk) == 0:
        return
    if fk[0] == fk[-1] and (len(fk) < 3 or (fk == fk[0]).all()):
        yield int(fk[0]), np.arange(len(fk))
        return
    order = np.argsort(fk, kind="stable")
    s = fk[order]
    bounds = [0, *(np.flatnonzero(s[1:] != s[:-1]) + 1).tolist(), len(s)]
    for a, b in itertools.pairwise(bounds):
        yield int(s[a]), order[a:b]
