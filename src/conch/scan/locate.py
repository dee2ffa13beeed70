"""Step 2 of the general path: locate each live key's fresh cell, per read unit.

A *read unit* is the columns of one group held by the same set of fragments: they share
fresh-cell locations. (Not merely the same key spaces: masked fragments let two fragments of one
group on one key space hold different columns of the same rows.) For each live key, the newest key space holding the unit's columns whose
row is newer than the key's tombstone holds the fresh cell; that key-space row maps through the
fragments' key masks (`keymask.locate`) to a fragment and a row within it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from conch.files.manifest import Fragment
from conch.model.schema import Column
from conch.scan.context import ScanContext
from conch.scan.keymask import locate
from conch.scan.keyspace import MergedKeys


@dataclass
class ReadUnit:
    """Columns of one group held by the same fragments: they share fresh-cell locations."""

    group: str
    columns: list[Column]
    fragments: list[Fragment]
    frag: np.ndarray  # per output key: index into `fragments`, -1 = no cell (null)
    row: np.ndarray  # per output key: row within that fragment
    shared: set[int] = field(default_factory=set)  # fragments many batches need: decode once
    # every fragment decoded and concatenated (many small overlapping runs): one take per batch
    resident: pa.Table | None = None
    base: np.ndarray | None = None  # fragment → its first row in `resident`

    def subset(self, cols: list[Column]) -> ReadUnit:
        return ReadUnit(self.group, cols, self.fragments, self.frag, self.row, self.shared)


def read_units(ctx: ScanContext, cols: list[Column], merged: MergedKeys, live_keys: np.ndarray) -> list[ReadUnit]:
    """The read units of `cols`, with the fresh cell of every live key (`live_keys`: indices of
    merged keys, in output order) located in their fragments."""
    plan = ctx.plan
    kidx, krow, gid = merged.ks, merged.row, merged.gid
    by_set: dict[tuple[str, frozenset[str]], list[Column]] = {}
    holders: dict[tuple[str, frozenset[str]], list[Fragment]] = {}
    ks_pos = {ks.id: i for i, ks in enumerate(plan.key_spaces)}
    for c in cols:
        frs = [f for f in plan.fragments.get(c.group, []) if c.id in f.column_ids]
        key = (c.group, frozenset(f.id for f in frs))
        by_set.setdefault(key, []).append(c)
        holders[key] = frs
    units = []
    remap = np.full(len(merged.alive), -1, dtype=np.int64)
    remap[live_keys] = np.arange(len(live_keys))
    for (group, fr_set), ucols in by_set.items():
        frs = holders[(group, fr_set)]
        ks_set = {ks_pos[f.key_space] for f in frs}
        ctx.consider(group, frs)
        n_out = len(live_keys)
        frag = np.full(n_out, -1, dtype=np.int64)
        row = np.zeros(n_out, dtype=np.int64)
        if ks_set and n_out:
            member = np.zeros(len(plan.key_spaces), dtype=bool)
            member[list(ks_set)] = True
            # rows sorted by key, newest first: a key's first valid row holds its fresh cell
            idx = np.nonzero(member[kidx] & merged.row_ok)[0]
            idx = idx[remap[gid[idx]] >= 0]
            masks = [ctx.mask(f) for f in frs]
            ks_of = [ks_pos[f.key_space] for f in frs]
            if all(not f.mask for f in frs):  # dense fragments tile their key spaces' rows
                idx = _firsts(idx, gid)
                which, frow = locate(masks, ks_of, kidx[idx], krow[idx])
            else:  # a sparse fragment's key space may lack a key's cell: the next row may hold it
                which, frow = locate(masks, ks_of, kidx[idx], krow[idx])
                held = which >= 0
                idx, which, frow = idx[held], which[held], frow[held]
                first = _firsts(np.arange(len(idx)), gid[idx])
                idx, which, frow = idx[first], which[first], frow[first]
            out_pos = remap[gid[idx]]
            frag[out_pos] = which
            row[out_pos] = frow
        units.append(ReadUnit(group, ucols, frs, frag, row))
    return units


def _firsts(idx: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """The entries of `idx` (merged-row indices, grouped by key) that are first of their key."""
    g = gid[idx]
    first = np.ones(len(idx), dtype=bool)
    first[1:] = g[1:] != g[:-1]
    return idx[first]
