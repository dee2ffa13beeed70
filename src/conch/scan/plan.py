"""Scan planning (DESIGN §5, spec/001): resolve columns to groups, choose the key spaces and
fragments a scan must consider, and prune what it provably does not need.

Pruning here never changes which cell is fresh: a key space or fragment is dropped only when it
is outside the time interval (its cells are not considered at all, spec/000) or holds no key the
key predicate admits. Statistics-based pruning happens later, per fresh cell (see `execute`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from conch.errors import ColumnNotFoundError, ExpressionError, LevelError, TimeTravelError
from conch.expr.tree import Arith, Col, Expr, Lit, as_expr, check_types, columns, rename
from conch.files.manifest import Fragment, KeySpace, TableState
from conch.model.keys import EncodedRange, KeyPredicate, KeySet, predicate_bounds, span_overlaps, to_key_predicate
from conch.model.schema import Column, Schema, join_path
from conch.model.time import to_time as parse_time
from conch.scan.keyfilter import key_range_of


@dataclass
class ScanPlan:
    """Everything a scan will read, decided before any data file is opened."""

    state: TableState
    level: str
    columns: list[Column]  # projected
    filter: Expr | None  # over full column paths and key column names
    filter_columns: list[Column]  # value columns the filter reads
    filter_keys: list[str]  # key columns the filter reads (evaluated on keys, never on values)
    key_predicate: KeyPredicate | None  # `keys=`, and filter terms on keys turned into a range
    asof: int | None
    since: int | None
    key_spaces: list[KeySpace]
    tombstones: list[KeySpace]
    fragments: dict[str, list[Fragment]]  # by group
    pruned: dict[str, int] = field(default_factory=dict)
    limit: int | None = None
    within: EncodedRange | None = None  # a split's key range (full-key encodings), see `narrow`

    @property
    def schema(self) -> Schema:
        return self.state.schema

    @property
    def key_fields(self) -> list[Any]:
        return self.schema.key_fields(self.level)


def to_time(t: object, what: str) -> int | None:
    """Commit times are µs since the epoch; datetimes and ISO strings are converted
    (`conch.model.time`, the one parser of Python, CLI and Spark)."""
    return parse_time(t, what)


def resolve_columns(schema: Schema, level: str | None, selectors: tuple[Any, ...]) -> tuple[str, list[Column]]:
    """Column selectors (paths, groups, `Col`s) → the scan level and its columns."""
    paths = [s.path if hasattr(s, "path") else s for s in selectors]
    if level is not None:
        schema.level(level)
    # key columns are always in the output: naming them selects nothing more
    keys = set(schema.key_names(level or ""))
    if paths and all(isinstance(p, str) and p in keys for p in paths):
        return level or "", []
    paths = [p for p in paths if not (isinstance(p, str) and p in keys and not schema.has_column(p))]
    if not paths:
        lvl = level or ""
        return lvl, schema.columns_of(lvl)
    out: list[Column] = []
    levels: set[str] = set()
    for p in paths:
        if not isinstance(p, str):
            raise ColumnNotFoundError(f"column selectors are paths like 'audio.bytes', got {p!r}")
        lvl, cols = _resolve_first(schema, [join_path(level, p), p] if level else [p])
        levels.add(lvl)
        out.extend(c for c in cols if c not in out)
    if level is not None:
        levels.add(level)
    if len(levels) > 1:
        raise LevelError(
            f"columns {paths} come from levels {sorted(levels)}; a scan reads one level "
            "(use the nested expression API to broadcast or reduce across levels)"
        )
    return levels.pop(), out


def _resolve_first(schema: Schema, candidates: list[str]) -> tuple[str, list[Column]]:
    """The first candidate path (relative to the level, then full) naming columns or a group;
    else the first candidate's error, which lists the known columns."""
    first: ColumnNotFoundError | None = None
    for cand in candidates:
        try:
            return schema.resolve(cand)
        except ColumnNotFoundError as e:
            first = first or e
    assert first is not None
    raise first


def plan_scan(
    state: TableState,
    selectors: tuple[Any, ...],
    where: Expr | None = None,
    keys: Any = None,
    asof: int | datetime | None = None,
    since: int | datetime | None = None,
    level: str | None = None,
    limit: int | None = None,
) -> ScanPlan:
    """Resolve a scan's arguments against `state` and choose what it must read."""
    schema = state.schema
    asof_us, since_us = to_time(asof, "asof"), to_time(since, "since")
    if asof_us is not None and since_us is not None and since_us > asof_us:
        raise TimeTravelError(f"since ({since_us}) is after asof ({asof_us}): the interval is empty")
    lvl, cols = resolve_columns(schema, level, selectors)
    key_names = schema.key_names(lvl)
    filt, filt_cols, filt_keys = None, [], []
    if where is not None:
        where = as_expr(where)
        if not isinstance(where, Expr) or isinstance(where, Col | Lit | Arith):
            raise ExpressionError(f"where= takes a Conch expression like t['x'] < 1 (a condition), got {where!r}")

        def full(p: str) -> str:
            if schema.has_column(p):
                return p
            if lvl and schema.has_column(join_path(lvl, p)):
                return join_path(lvl, p)
            if p in key_names:
                return p
            schema.column(p)  # raises ColumnNotFoundError
            return p

        filt = rename(where, full)
        key_types = {f.name: f.type for f in schema.key_fields(lvl)}
        check_types(filt, lambda c: schema.column(c.path).type if schema.has_column(c.path) else key_types.get(c.path))
        paths = columns(filt)
        filt_keys = [p for p in dict.fromkeys(paths) if p in key_names and not schema.has_column(p)]
        filt_cols = [schema.column(p) for p in paths if p not in filt_keys]
        other = {c.level for c in filt_cols} - {lvl}
        if other:
            raise LevelError(f"filter {where!r} reads level(s) {sorted(other)} but the scan is of level {lvl!r}")
    key_fields = schema.key_fields(lvl)
    pred = to_key_predicate(keys, key_fields) if keys is not None else None
    if filt is not None and filt_keys and pred is None:
        # terms on key columns become a key range (pruning key spaces, binary search in runs);
        # what the range does not state exactly stays in the filter, evaluated on the keys
        pred, filt = key_range_of(filt, key_fields)
        if filt is not None:
            filt_keys = [p for p in dict.fromkeys(columns(filt)) if p in filt_keys]
        else:
            filt_keys, filt_cols = [], []
    bounds = predicate_bounds(pred, key_fields) if pred is not None else None
    key_list = pred.encoded.to_pylist() if isinstance(pred, KeySet) else None

    pruned = {"key_spaces_time": 0, "key_spaces_span": 0, "fragments_of_pruned_key_spaces": 0}
    ancestors = {a.path for a in schema.ancestry(lvl)}
    data_ks: list[KeySpace] = []
    tombs: list[KeySpace] = []
    for ks in state.key_spaces.values():
        if ks.kind == "tombstone":
            if ks.level in ancestors and (asof_us is None or ks.time <= asof_us):
                tombs.append(ks)
            continue
        if ks.level != lvl:
            continue
        if (asof_us is not None and ks.time > asof_us) or (since_us is not None and ks.time < since_us):
            pruned["key_spaces_time"] += 1
            continue
        if bounds is not None and not span_overlaps(bounds, bytes.fromhex(ks.min_key), bytes.fromhex(ks.max_key)):
            pruned["key_spaces_span"] += 1
            continue
        if key_list is not None and not _holds_one(key_list, bytes.fromhex(ks.min_key), bytes.fromhex(ks.max_key)):
            pruned["key_spaces_span"] += 1  # a key set's keys all fall between this run's keys
            continue
        data_ks.append(ks)
    data_ks.sort(key=lambda k: (k.time, k.seq, k.id))
    live = {ks.id for ks in data_ks}
    needed_groups = {c.group for c in cols} | {c.group for c in filt_cols}
    frags: dict[str, list[Fragment]] = {g: [] for g in needed_groups}
    for fr in state.fragments.values():
        if fr.level != lvl or fr.group not in needed_groups:
            continue
        if fr.key_space in live:
            frags[fr.group].append(fr)
        else:
            pruned["fragments_of_pruned_key_spaces"] += 1
    for g in frags:
        frags[g].sort(key=lambda f: (f.key_space, f.start))
    return ScanPlan(
        state=state,
        level=lvl,
        columns=cols,
        filter=filt,
        filter_columns=filt_cols,
        filter_keys=filt_keys,
        key_predicate=pred,
        asof=asof_us,
        since=since_us,
        key_spaces=data_ks,
        tombstones=tombs,
        fragments=frags,
        pruned=pruned,
        limit=limit,
    )


def _holds_one(keys: list[bytes], lo: bytes, hi: bytes) -> bool:
    """Whether some key of the sorted encoded `keys` is in the span [lo, hi]: a take of 50 keys
    considers only the runs whose spans hold one of them, not every run between the extremes."""
    i = bisect.bisect_left(keys, lo)
    return i < len(keys) and keys[i] <= hi


def narrow(plan: ScanPlan, r: EncodedRange) -> ScanPlan:
    """`plan` restricted to keys whose encoding is in `r` (bounds are full-key encodings, as
    `splits` makes them): key spaces outside it are pruned by their spans."""
    if plan.within is not None:
        r = plan.within.intersect(r)
    kept = [ks for ks in plan.key_spaces if span_overlaps(r, bytes.fromhex(ks.min_key), bytes.fromhex(ks.max_key))]
    live = {ks.id for ks in kept}
    pruned = dict(plan.pruned)
    pruned["key_spaces_span"] = pruned.get("key_spaces_span", 0) + len(plan.key_spaces) - len(kept)
    frags = {g: [f for f in frs if f.key_space in live] for g, frs in plan.fragments.items()}
    return replace(plan, key_spaces=kept, fragments=frags, within=r, pruned=pruned)
