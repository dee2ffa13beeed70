"""Key-range splits: a scan cut into disjoint, picklable pieces readable in other processes.

`scan.splits(n)` (`plan_splits` here) cuts a scan into about `n` splits of similar size,
each a key range of the scan's level. Together they return exactly the scan's records, each
once, in key order split after split. A `Split` (`conch.scan.api`) is plain data: the scan's
snapshot (a `conch.api.snapshot.Snapshot`: the warehouse connection, the table, the pinned commit)
and its `ScanRequest` narrowed to the key range. It is picklable and `split.open()` reads it in any process (a Spark
task, a data-loader worker, a distributed maintenance job): the snapshot reopens the warehouse
exactly as `connect()` reached it (metastore, token, storage options) and the split scans that
range of the pinned version.

Where the runs (key spaces) are disjoint and there are enough of them, splits are cut at run
starts: each split reads whole runs and fragments, a zip with no take. Otherwise at quantiles of
keys sampled evenly from every run (overlapping runs' edges say little about sizes). A filter
whose terms fragment statistics can refute limits the splits to the key spans where it may hold
(`conch.scan.candidates`), and sizes them by the records it may return.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.errors import ConchError
from conch.files.keycache import KeyCache
from conch.files.manifest import KeySpace
from conch.model.keys import EncodedRange, encode_keys, predicate_bounds
from conch.scan.candidates import NOTHING, candidate_ranges, estimated_rows, pieces, runs_meeting
from conch.scan.plan import ScanPlan
from conch.scan.pushdown import StatsCache

SAMPLES_PER_SPLIT = 64
ROWS_PER_SPLIT = 500_000  # the size of a split when `n` is not given: rows, or ...
BYTES_PER_SPLIT = 128 << 20  # ... bytes of the considered fragments, whichever needs more splits
MAX_SPLITS = 4096


def plan_splits(plan: ScanPlan, key_cache: KeyCache, n: int | None = None) -> list[EncodedRange]:
    """The key ranges cutting the scan of `plan` into at most `n` disjoint splits of about equal rows (fewer when the
    scan has fewer keys; `n=None`: sized by `ROWS_PER_SPLIT` and `BYTES_PER_SPLIT`); their union
    is the scan, in key order. A scan with a `limit` cannot be split."""
    # only where the filter may hold by fragment statistics is cut into (and sizes) splits
    stats = StatsCache()  # each fragment's statistics decoded once for both
    spans = candidate_ranges(plan, stats, keys=key_cache)
    runs = list(plan.key_spaces) if spans is None else runs_meeting(plan.key_spaces, spans)
    if n is None:
        # a filter that statistics bound: sized by the records it may return, not all it reads
        rows = sum(ks.rows for ks in runs) if spans is None else estimated_rows(plan, runs, stats)
        # masked fragments share data files: each file counts once
        live = {ks.id for ks in runs}
        nbytes = sum({f.path: f.bytes for frs in plan.fragments.values() for f in frs if f.key_space in live}.values())
        n = min(MAX_SPLITS, max(1, -(-rows // ROWS_PER_SPLIT), -(-nbytes // BYTES_PER_SPLIT)))
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConchError(f"splits(n) takes a positive number of splits, got {n!r}")
    if plan.limit is not None:
        raise ConchError("a scan with a limit cannot be split (its rows depend on the whole scan); split, then limit")
    fields = plan.key_fields
    # the scan's own key predicate stays in `keys=`; splits with no key in it are dropped
    bound = predicate_bounds(plan.key_predicate, fields) if plan.key_predicate is not None else None
    n = min(n, max(sum(ks.rows for ks in runs), 1))
    cuts: list[bytes] = []
    if n > 1 and runs and fields:
        cuts = boundaries(runs, n, fields, key_cache)
    edges: list[bytes | None] = [None, *cuts, None]
    ranges = [
        EncodedRange(lo, hi) if plan.within is None else EncodedRange(lo, hi).intersect(plan.within)
        for lo, hi in itertools.pairwise(edges)
    ]
    if spans is not None:
        ranges = pieces(ranges, spans, n)
    kept = [r for r in ranges if not r.empty and (bound is None or not r.intersect(bound).empty)]
    return kept or ranges[:1] or [NOTHING]  # no key at all: one split that returns nothing


def boundaries(runs: list[KeySpace], n: int, fields: list[pa.Field], cache: KeyCache) -> list[bytes]:
    """At most n - 1 ascending full-key encodings cutting `runs` into parts of about equal rows."""
    runs = sorted(runs, key=lambda k: k.min_key)
    disjoint = all(a.max_key < b.min_key for a, b in itertools.pairwise(runs))
    if disjoint and len(runs) >= n:
        return _run_boundaries(runs, n)
    return _sampled_boundaries(runs, n, fields, cache)


def _run_boundaries(runs: list[KeySpace], n: int) -> list[bytes]:
    """Cut disjoint sorted runs into n groups of about equal rows, at run starts."""
    total = sum(r.rows for r in runs)
    out: list[bytes] = []
    acc, target = 0, total / n
    for r in runs:
        if acc >= target * (len(out) + 1) and len(out) < n - 1 and acc > 0:
            out.append(bytes.fromhex(r.min_key))
        acc += r.rows
    return out


def _sampled_boundaries(runs: list[KeySpace], n: int, fields: list[pa.Field], cache: KeyCache) -> list[bytes]:
    """Quantiles of keys sampled evenly from every run."""
    per_run = max(SAMPLES_PER_SPLIT, (SAMPLES_PER_SPLIT * n) // max(len(runs), 1))
    samples = []
    for ks in runs:
        keys = cache.keys(ks, fields)
        step = max(1, keys.num_rows // per_run)
        samples.append(keys.take(pa.array(np.arange(0, keys.num_rows, step))))
    enc = encode_keys(pa.concat_tables(samples).columns)
    enc = pc.unique(pc.take(enc, pc.sort_indices(enc)))
    picks = [int(len(enc) * i / n) for i in range(1, n)]
    out: list[bytes] = []
    for p in picks:
        b = enc[p].as_py()
        if (not out or b > out[-1]) and p > 0:
            out.append(b)
    return out
