"""Scan planning (DESIGN §5, spec/001): resolve columns to groups, choose the key spaces and
fragments a scan must consider, and prune what it provably does not need.

Pruning here never changes which cell is fresh: a key space or fragment is dropped only when it
is outside the time interval (its cells are not considered at all, spec/000) or holds no key the
key predicate admits. Statistics-based pruning happens later, per fresh cell (see `execute`).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace
from typing import Any

from conch.errors import TimeTravelError
from conch.expr.tree import Expr, columns
from conch.files.manifest import Fragment, KeySpace, TableState
from conch.model.keys import EncodedRange, KeyPredicate, KeySet, predicate_bounds, span_overlaps
from conch.model.schema import Column, Schema
from conch.scan.filter import and_all, extract
from conch.scan.request import ScanRequest


@dataclass
class ScanPlan:
    """Everything a scan will read, decided before any data file is opened."""

    state: TableState
    level: str
    columns: list[Column]  # projected
    filter: Expr | None  # over full column paths and key column names: the AND of `terms`
    terms: tuple[Expr, ...]  # the filter's AND terms (`conch.scan.filter`), key terms first
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


def plan_scan(state: TableState, request: ScanRequest, asof: int | None = None) -> ScanPlan:
    """Choose what the scan `request` (resolved against `state`'s schema) of the version pinned
    at `asof` (µs; None: the newest) must read."""
    schema = state.schema
    asof_us, since_us = asof, request.since
    if asof_us is not None and since_us is not None and since_us > asof_us:
        raise TimeTravelError(f"since ({since_us}) is after asof ({asof_us}): the interval is empty")
    lvl = request.level
    cols = [schema.column(p) for p in request.columns]
    key_fields = schema.key_fields(lvl)
    pred = request.keys
    key_terms = request.key_terms
    if key_terms and pred is None:
        # terms on key columns become a key range (pruning key spaces, binary search in runs);
        # what the range does not state exactly stays in the filter, evaluated on the keys
        found = extract(and_all(key_terms), key_fields)
        pred, key_terms = found.predicate(key_fields), found.rest
    terms = key_terms + request.value_terms
    filt = and_all(terms)
    key_names = set(schema.key_names(lvl))
    paths = list(dict.fromkeys(p for t in terms for p in columns(t)))
    filt_keys = [p for p in paths if p in key_names and not schema.has_column(p)]
    filt_cols = [schema.column(p) for p in paths if p not in filt_keys]
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
    plan = ScanPlan(
        state=state,
        level=lvl,
        columns=cols,
        filter=filt,
        terms=terms,
        filter_columns=filt_cols,
        filter_keys=filt_keys,
        key_predicate=pred,
        asof=asof_us,
        since=since_us,
        key_spaces=data_ks,
        tombstones=tombs,
        fragments=frags,
        pruned=pruned,
        limit=request.limit,
    )
    return plan if request.within is None else narrow(plan, request.within)


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
    return replace(without(plan, kept, plan.tombstones, "key_spaces_span"), within=r)


def without(plan: ScanPlan, kept: list[KeySpace], tombstones: list[KeySpace], reason: str) -> ScanPlan:
    """`plan` considering only the key spaces `kept` and the tombstone sets `tombstones` (the
    others hold no key it reads: counted in `pruned[reason]`), and the fragments of those kept."""
    if len(kept) == len(plan.key_spaces) and len(tombstones) == len(plan.tombstones):
        return plan
    live = {ks.id for ks in kept}
    pruned = dict(plan.pruned)
    pruned[reason] = pruned.get(reason, 0) + len(plan.key_spaces) - len(kept)
    frags = {g: [f for f in frs if f.key_space in live] for g, frs in plan.fragments.items()}
    return replace(plan, key_spaces=kept, tombstones=tombstones, fragments=frags, pruned=pruned)
