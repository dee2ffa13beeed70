"""Candidate key spans: where a scan's filter may hold, by fragment statistics, before any read.

Split planning (`conch.scan.splits`) cuts only these spans, so a selective filter over a table of
many runs plans few, non-empty splits instead of one per run (a Spark task, a loader shard) that
returns nothing.

Why this never drops a matching record: a record's cell of column group `g` is the fresh cell
held by some fragment of `g` in a key space whose span holds the key, or, if no key space holds
one, null. So a filter term `t` over the columns of one group `g`, false when those columns are
null, can only hold for keys inside the spans of key spaces that have a fragment of `g` whose
statistics do not prove `t` false (`may_match_many`, the same verdicts the scan itself prunes
by). A key passes the filter only if it passes every AND term: the candidate spans are the
intersection, over such terms, of each term's union of spans. Other terms (over keys, over
several groups, true on nulls) bound nothing and are left to the scan.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable

import numpy as np
import pyarrow as pa

from conch.expr.tree import Cmp, Expr, col_op_lit, columns
from conch.expr.tree import mask as filter_mask
from conch.files.keycache import KeyCache
from conch.files.manifest import KeySpace
from conch.model.keys import EncodedRange, encode_keys, span_overlaps
from conch.model.sets import distinct
from conch.scan.keyspace import numeric_key
from conch.scan.plan import ScanPlan
from conch.scan.pushdown import StatsCache, may_match_many

Span = tuple[bytes, bytes]  # inclusive full-key encodings, lo <= hi


NOTHING = EncodedRange(b"", b"")  # the empty key range


def candidate_ranges(
    plan: ScanPlan, stats: StatsCache | None = None, keys: KeyCache | None = None
) -> list[EncodedRange] | None:
    """Sorted, disjoint key ranges (full-key encodings, `hi` exclusive) outside which no record
    passes `plan.filter`, neighbours joined where no run has a key between them; None when no
    term of the filter bounds the keys this way (every key may match). With `keys`, a run whose
    fragments the statistics split into matching and not contributes only its matching
    fragments' key spans (read from its key table)."""
    spans = candidate_spans(plan, stats, keys)
    if spans is None:
        return None
    numeric = numeric_key(plan.key_fields)
    return [EncodedRange(lo, _after(hi, numeric)) for lo, hi in join_gaps(spans, plan.key_spaces)]


def candidate_spans(plan: ScanPlan, stats: StatsCache | None = None, keys: KeyCache | None = None) -> list[Span] | None:
    """Sorted, disjoint inclusive key spans outside which no record passes `plan.filter`; None
    when no term of the filter bounds the keys this way."""
    if plan.filter is None:
        return None
    stats = stats or StatsCache()
    schema = plan.schema
    runs = {ks.id: ks for ks in plan.key_spaces}
    out: list[Span] | None = None
    for term in plan.terms:
        group = _single_group(plan, term)
        if group is None or _holds_on_nulls(plan, term):
            continue
        frs = plan.fragments.get(group, [])
        may = may_match_many(term, frs, stats, lambda p: (schema.column(p).id, schema.column(p).type))
        partial = {fr.key_space for fr, m in zip(frs, may, strict=True) if not m}
        spans = []
        cut: dict[str, list[tuple[int, int]]] = {}  # run → (first, last) rows of its matching fragments
        for fr, m in zip(frs, may, strict=True):
            if not m:
                continue
            ks = runs[fr.key_space]
            dense = not fr.mask  # a masked fragment's rows are not a contiguous stretch of the run
            if keys is not None and dense and ks.id in partial and fr.rows < ks.rows:
                cut.setdefault(ks.id, []).append((fr.start, fr.start + fr.rows - 1))
            else:
                spans.append(_span(ks))
        for ks_id, ends in cut.items():
            assert keys is not None
            spans += _rows_spans(keys, runs[ks_id], plan, ends)
        spans = _union(spans)
        out = spans if out is None else _intersect(out, spans)
    return out


def estimated_rows(plan: ScanPlan, runs: list[KeySpace], stats: StatsCache | None = None) -> int:
    """About how many records of `runs` pass the filter: their rows, or fewer where a range term
    (`x < 5`, ...) on a numeric column holds over only part of its fragments' [min, max] (values
    taken as evenly spread). Sizes splits only: a wrong guess costs balance, never records."""
    total = sum(ks.rows for ks in runs)
    if plan.filter is None:
        return total
    stats = stats or StatsCache()
    live = {ks.id for ks in runs}
    best = total
    for term in plan.terms:
        norm = col_op_lit(term) if isinstance(term, Cmp) else None
        if norm is None or norm[1] not in ("<", "<=", ">", ">=") or not plan.schema.has_column(norm[0]):
            continue
        path, op, value = norm
        c = plan.schema.column(path)
        if not (pa.types.is_integer(c.type) or pa.types.is_floating(c.type)) or not isinstance(value, int | float):
            continue
        frs = [f for f in plan.fragments.get(c.group, []) if f.key_space in live]
        if not frs:
            continue
        lo, hi, _ = stats.column(frs, c.id, c.type)
        lo_v = np.asarray(lo.cast(pa.float64()).fill_null(-np.inf).to_numpy(zero_copy_only=False))
        hi_v = np.asarray(hi.cast(pa.float64()).fill_null(np.inf).to_numpy(zero_copy_only=False))
        with np.errstate(invalid="ignore", divide="ignore"):
            below = np.clip((float(value) - lo_v) / (hi_v - lo_v), 0.0, 1.0)
        below = np.where(np.isfinite(below), below, 1.0)  # unknown or single-valued: all
        share = below if op in ("<", "<=") else 1.0 - below
        rows = np.array([f.rows for f in frs], dtype=np.float64)
        best = min(best, int(np.ceil(float((np.maximum(share, 0.0) * rows).sum()))))
    return best


def _rows_spans(keys: KeyCache, ks: KeySpace, plan: ScanPlan, ends: list[tuple[int, int]]) -> list[Span]:
    """The key spans of rows `[first, last]` of the sorted run `ks`, for each pair of `ends`:
    their end keys, read in one go (not the run's whole key table)."""
    at = distinct(np.array(ends, dtype=np.int64).ravel())  # both ends of every pair: one 1-D set
    enc = encode_keys(keys.keys_at(ks, plan.key_fields, at).columns).to_pylist()
    key = dict(zip(at.tolist(), enc, strict=True))
    return [(key[a], key[b]) for a, b in ends]


def _after(key: bytes, numeric: bool) -> bytes | None:
    """The smallest full-key encoding above `key` (None: there is none). A numeric key is read
    back as its value (`keyspace.selected_rows`), so its successor is the next fixed-width
    encoding, not `key + b"\\x00"` (which would decode as `key` itself)."""
    if not numeric:
        return key + b"\x00"
    width = len(key)
    nxt = int.from_bytes(key, "big") + 1
    return None if nxt >> (8 * width) else nxt.to_bytes(width, "big")


def join_gaps(spans: list[Span], runs: Iterable[KeySpace]) -> list[Span]:
    """`spans` with neighbours merged where no run has a key between them: one range then reads
    the same runs as the two, in one split instead of two."""
    data = _union(_span(ks) for ks in runs)
    ends = [hi for _, hi in data]
    out: list[Span] = []
    for lo, hi in spans:
        if out:
            # the first stretch of data ending after the previous span: does it start before this one?
            i = bisect.bisect_right(ends, out[-1][1])
            if i == len(data) or data[i][0] >= lo:
                out[-1] = (out[-1][0], hi)
                continue
        out.append((lo, hi))
    return out


def runs_meeting(runs: Iterable[KeySpace], ranges: list[EncodedRange]) -> list[KeySpace]:
    """The runs whose key span meets one of the sorted, disjoint `ranges`."""
    los = [r.lo or b"" for r in ranges]
    out = []
    for ks in runs:
        lo, hi = _span(ks)
        i = bisect.bisect_right(los, hi) - 1  # the last range starting at or before the span's end
        if i >= 0 and span_overlaps(ranges[i], lo, hi):
            out.append(ks)
    return out


def pieces(ranges: list[EncodedRange], within: list[EncodedRange], n: int) -> list[EncodedRange]:
    """The non-empty parts of the sorted, disjoint `ranges` inside the sorted, disjoint `within`;
    where that makes more than `n`, neighbouring parts are joined (their hull) into `n` ranges."""
    parts: list[EncodedRange] = []
    i = j = 0
    while i < len(ranges) and j < len(within):
        a, b = ranges[i], within[j]
        part = a.intersect(b)
        if not part.empty:
            parts.append(part)
        if _end(a) < _end(b):
            i += 1
        else:
            j += 1
    if len(parts) <= n:
        return parts
    cuts = [len(parts) * k // n for k in range(n + 1)]
    return [EncodedRange(parts[a].lo, parts[b - 1].hi) for a, b in itertools.pairwise(cuts)]


def _end(r: EncodedRange) -> tuple[int, bytes]:
    return (1, b"") if r.hi is None else (0, r.hi)


def _span(ks: KeySpace) -> Span:
    return bytes.fromhex(ks.min_key), bytes.fromhex(ks.max_key)


def _single_group(plan: ScanPlan, term: Expr) -> str | None:
    """The one column group `term` reads, or None (keys, several groups, no column)."""
    paths = columns(term)
    if not paths or any(not plan.schema.has_column(p) for p in paths):
        return None
    groups = {plan.schema.column(p).group for p in paths}
    return groups.pop() if len(groups) == 1 else None


def _holds_on_nulls(plan: ScanPlan, term: Expr) -> bool:
    """Whether `term` holds for a record with no cell in its group (all its columns null)."""
    nulls = {p: pa.nulls(1, plan.schema.column(p).type) for p in columns(term)}
    return bool(filter_mask(term, nulls.__getitem__)[0])


def _union(spans: Iterable[Span]) -> list[Span]:
    out: list[Span] = []
    for lo, hi in sorted(set(spans)):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


def _intersect(a: list[Span], b: list[Span]) -> list[Span]:
    out: list[Span] = []
    i = j = 0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if lo <= hi:
            out.append((lo, hi))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out
