"""Step 2 of the general path: locate each live key's fresh cell, per read unit.

A *read unit* is the columns of one group held by the same set of key spaces: they share
fresh-cell locations. For each live key, the newest key space holding the unit's columns whose
row is newer than the key's tombstone holds the fresh cell; that key-space row maps through the
fragments' key masks (`keymask.locate`) to a fragment and a row within it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from conch.manifest import Fragment
from conch.scan.context import ScanContext
from conch.scan.keymask import key_mask, locate
from conch.scan.keyspace import MergedKeys
from conch.schema import Column


@dataclass
class ReadUnit:
    """Columns of one group held by the same key spaces: they share fresh-cell locations."""

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
    by_set: dict[tuple[str, frozenset[int]], list[Column]] = {}
    holders: dict[tuple[str, frozenset[int]], list[Fragment]] = {}
    ks_pos = {ks.id: i for i, ks in enumerate(plan.key_spaces)}
    for c in cols:
        frs = [f for f in plan.fragments.get(c.group, []) if c.id in f.column_ids]
        key = (c.group, frozenset(ks_pos[f.key_space] for f in frs))
        by_set.setdefault(key, []).append(c)
        holders[key] = frs
    units = []
    remap = np.full(len(merged.alive), -1, dtype=np.int64)
    remap[live_keys] = np.arange(len(live_keys))
    for (group, ks_set), ucols in by_set.items():
        frs = holders[(group, ks_set)]
        ctx.consider(group, frs)
        n_out = len(live_keys)
        frag = np.full(n_out, -1, dtype=np.int64)
        row = np.zeros(n_out, dtype=np.int64)
        if ks_set and n_out:
            member = np.zeros(len(plan.key_spaces), dtype=bool)
            member[list(ks_set)] = True
            # rows sorted by key, newest first: a key's first valid row holds its fresh cell
            idx = np.nonzero(member[kidx] & merged.row_ok)[0]
            g = gid[idx]
            firsts = np.ones(len(idx), dtype=bool)
            firsts[1:] = g[1:] != g[:-1]
            idx, g = idx[firsts], g[firsts]
            out_pos = remap[g]
            keep = out_pos >= 0
            idx, out_pos = idx[keep], out_pos[keep]
            masks = [key_mask(f) for f in frs]
            which, frow = locate(masks, [ks_pos[f.key_space] for f in frs], kidx[idx], krow[idx])
            frag[out_pos] = which
            row[out_pos] = frow
        units.append(ReadUnit(group, ucols, frs, frag, row))
    return units
