"""The change feed: which keys' fresh records differ between two versions (`Table.changes`).

Conch's cell model makes a change feed exact: it is the difference of two fresh-record states.
`changes(since, until)` compares the state at version `since` (exclusive: the base) with the
state at `until` (inclusive; default the newest), i.e. the effect of the commits in
`(since, until]`, one row per key whose fresh record differs:

- key columns (the level's full key), then `_change` (`"insert"`: absent at `since`, present at
  `until`; `"delete"`: the reverse; `"update"`: present at both, some value differs),
  `_version` and `_time` (int64 µs) of the newest commit in the interval that wrote or deleted
  the key (a write of equal values counts: it touched the key);
- `images="after"` (default): the record at `until` nested as a scan returns it (null-filled on
  a delete); `"before_and_after"`: also `_before`, one struct column holding the record at
  `since` in the same shape (null on an insert); a struct keeps the image's nesting and cannot
  clash with a column name, as prefixed top-level names such as `before.a` would with the
  dotted paths that name nested columns; `"keys"`: no image, only keys and the change columns.
- `per_commit=True`: one row per key per commit in the interval that changed its fresh record
  (compared with the state just before that commit), oldest commit first; `_before` is then the
  record just before that commit.

`since`/`until` are versions (`int`: `Commit.seq`; 0 is the empty table before the first
commit), tag names (`Table.tag`), or times (datetime or ISO string: the version in force then).
`level=` gives a child level's changes (its rows are keyed by the level's full key); a delete of
an ancestor key changes every record below it.

**Cost follows the commits in the interval, not the table.** The candidate keys are read from
the runs and tombstones those commits added (the WAL entries between the two versions name
them; compactions change no fresh record and are skipped), plus, for a tombstone on an ancestor
level, the keys under its prefixes at the older version (one key scan over the tombstone's key
span). The before and after records are then looked up for just those keys (`keys=` scans,
which prune runs by key span and binary-search the rest), in chunks of `CHUNK_KEYS` keys, so
memory is bounded. Three cases fall back to comparing every key of both versions: an overwrite
(`Truncate`) or a fast-forward to a branch (whose commits are in the branch's log) in the
interval, and a `since` before the time-travel horizon (a tagged version): the runs of expired
commits may be gone, and `_version`/`_time` are then `until`'s for keys no retained run names.

Values are compared cell by cell on the columns of `until` matched by column id (a column
renamed since compares with its old name's values; one added since is null before). Floats
compare NaN equal to NaN.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from conch.api.snapshot import Snapshot
from conch.errors import InvalidArgumentError, TimeTravelError
from conch.files.manifest import KeySpace
from conch.log.wal import AddKeySpace, Truncate
from conch.model.keys import EncodedRange, KeySet, _prefix_successor, encode_keys
from conch.model.schema import Column, Schema
from conch.model.time import to_time
from conch.scan import Scan
from conch.scan.assemble import output_schema
from conch.scan.metrics import ScanMetrics
from conch.scan.request import resolve_columns
from conch.scan.result import ScanResult

if TYPE_CHECKING:
    from conch.log.tablelog import TableLog

IMAGES = ("after", "before_and_after", "keys")
CHUNK_KEYS = 65536
NO_CANDIDATES_KINDS = ("compact", "flush", "vacuum", "expire", "schema", "tag")
CHANGE_FIELDS = [pa.field("_change", pa.string()), pa.field("_version", pa.int64()), pa.field("_time", pa.int64())]


def resolve_version(log: TableLog, v: Any, what: str) -> int:
    """A version from a version number, a tag name or a time (see the module doc)."""
    if isinstance(v, bool):
        raise InvalidArgumentError(f"{what}={v!r}: give a version (int), a tag name or a time")
    if isinstance(v, int):
        last = log.state().seq
        if not 0 <= v <= last:
            raise TimeTravelError(
                f"table {log.name!r} has no version {v}: versions are 0..{last} (see `conch history {log.name}` or `Table.history()`)"
            )
        return v
    if isinstance(v, str):
        tag = log.tag_version(v)
        if tag is not None:
            return tag
    try:
        t = to_time(v, what)
    except TimeTravelError as e:
        if not isinstance(v, str):
            raise
        known = ", ".join(sorted(log.tags())) or "none"
        raise TimeTravelError(
            f"{what}={v!r} is neither a tag of table {log.name!r} (tags: {known}) nor a time ({e})"
        ) from None
    assert t is not None
    first = log.first_commit_time()
    if first is None or t < first:
        return 0
    return int(log.warehouse.metastore.seq_at_time(log.id, t))


@dataclass
class _Candidates:
    """Candidate keys (encoded) with the newest commit that named each, or `full`: every key."""

    seqs: dict[bytes, int]
    full: bool = False


class Changes(ScanResult):
    """The result of `Table.changes` (a scan-like result: `to_arrow()`, `to_record_batches()`,
    `to_pylist()`, Polars/DuckDB through the Arrow stream). See `conch.api.changes`."""

    def __init__(
        self,
        log: TableLog,
        since: Any,
        until: Any = None,
        columns: Any = None,
        images: str = "after",
        per_commit: bool = False,
        level: str | None = None,
    ) -> None:
        if images not in IMAGES:
            raise InvalidArgumentError(f"images={images!r}: one of {', '.join(map(repr, IMAGES))}")
        self.log = log
        self.since = resolve_version(log, since, "since")
        self.until = log.state().seq if until is None else resolve_version(log, until, "until")
        if self.since > self.until:
            raise InvalidArgumentError(f"changes: since (version {self.since}) is after until (version {self.until})")
        self.images = images
        self.per_commit = per_commit
        state = log.state_at(version=self.until) if self.until else log.initial_state()
        self.schema_at_until: Schema = state.schema
        selectors = tuple([columns] if isinstance(columns, str) else columns or ())
        self.level, cols = resolve_columns(state.schema, level, selectors)
        self.columns: list[Column] = cols  # compared in every images mode
        self.key_fields = state.schema.key_fields(self.level)
        self.entries = list(log.entries(self.since, self.until))
        self.times = {s: t for s, t, _ in self.entries}
        self.scanned_keys = 0  # candidate keys looked up by the last run

    # ----- the ScanResult protocol ------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        image = output_schema(self.schema_at_until, self.level, self.columns)
        values = [f for f in image if f.name not in {k.name for k in self.key_fields}]
        out = [*self.key_fields, *CHANGE_FIELDS]
        if self.images != "keys":
            out += values
        if self.images == "before_and_after":
            out.append(pa.field("_before", pa.struct(values)))
        return pa.schema(out)

    def to_record_batches(self) -> pa.RecordBatchReader:
        return pa.RecordBatchReader.from_batches(self.schema, self._batches())

    def explain(self) -> str:
        kinds = [e.kind for _, _, e in self.entries]
        return (
            f"changes of table {self.log.name!r} level {self.level or 'root'!r}: versions ({self.since}, {self.until}], "
            f"{len(kinds)} commits ({', '.join(sorted(set(kinds))) or 'none'}); "
            f"{'per commit' if self.per_commit else 'net'}, images={self.images}; "
            f"keys looked up by the last run: {self.scanned_keys}"
        )

    def metrics(self) -> ScanMetrics:
        raise InvalidArgumentError("changes() has no scan metrics; see explain() for the keys it looked up")

    # ----- execution --------------------------------------------------------------------------
    def _batches(self) -> Iterator[pa.RecordBatch]:
        self.scanned_keys = 0
        if not self.per_commit:
            cand = self._candidates(self.entries, self.since)
            yield from self._diff(cand, self.since, self.until)
            return
        for seq, _, entry in self.entries:
            if entry.kind in NO_CANDIDATES_KINDS:
                continue
            cand = self._candidates([(seq, self.times[seq], entry)], seq - 1)
            yield from self._diff(cand, seq - 1, seq, version=seq)

    def _candidates(self, entries: list[Any], base: int) -> _Candidates:
        """Keys the commits of `entries` wrote or deleted at this level (and keys below the
        ancestor keys they deleted, as of version `base`)."""
        seqs: dict[bytes, int] = {}
        full = base < self._horizon_seq()
        ancestors = {a.path for a in self.schema_at_until.ancestry(self.level)[:-1]}
        for seq, _, entry in entries:
            if entry.kind in NO_CANDIDATES_KINDS:
                continue
            if entry.kind == "fast_forward":  # the branch's commits are not in this log (`conch.log.branching`)
                full = True
            for op in entry.ops:
                if isinstance(op, Truncate):
                    full = True
                if not isinstance(op, AddKeySpace) or op.key_space.rows == 0:
                    continue
                ks = op.key_space
                if ks.level == self.level:
                    enc = self._run_keys(ks, len(self.key_fields), full)
                elif ks.kind == "tombstone" and ks.level in ancestors and base > 0:
                    enc = self._keys_under(ks, base)
                else:
                    continue
                if enc is None:
                    continue
                for k in enc.to_pylist():
                    if seqs.get(k, 0) < seq:
                        seqs[k] = seq
        return _Candidates(seqs, full)

    def _run_keys(self, ks: KeySpace, n: int, tolerate_missing: bool) -> pa.BinaryArray | None:
        fields = self.schema_at_until.key_fields(ks.level)[:n]
        try:
            keys = self.log.key_cache.keys(ks, fields, keep=False)
        except (FileNotFoundError, OSError):
            if tolerate_missing:  # an expired commit's run (since is a tag before the horizon)
                return None
            raise
        return encode_keys(keys.columns)

    def _keys_under(self, tomb: KeySpace, base: int) -> pa.BinaryArray:
        """Keys of this level at version `base` under the tombstone's ancestor keys."""
        prefixes = self._run_keys(tomb, len(self.schema_at_until.key_fields(tomb.level)), False)
        assert prefixes is not None
        lo = bytes.fromhex(tomb.min_key)
        scan = self._scan(base, keys_only=True).within(EncodedRange(lo, _prefix_successor(bytes.fromhex(tomb.max_key))))
        n = len(self.schema_at_until.key_fields(tomb.level))
        out = []
        for b in scan.to_record_batches():
            if b.num_rows == 0:
                continue
            head = encode_keys(b.columns[:n])
            inside = pc.is_in(head, value_set=prefixes)
            out.append(pc.filter(encode_keys(b.columns[: len(self.key_fields)]), inside))
        return pa.concat_arrays(out) if out else pa.array([], pa.binary())

    def _horizon_seq(self) -> int:
        h = self.log.horizon()
        return int(self.log.warehouse.metastore.seq_at_time(self.log.id, h)) if h else 0

    def _scan(self, version: int, keys: KeySet | None = None, keys_only: bool = False, cols: Any = ()) -> Scan:
        names = tuple(f.name for f in self.key_fields)
        sel = names if keys_only or not cols else tuple(cols)
        return self.log_scan(sel, keys, version)

    def log_scan(self, selectors: tuple[Any, ...], keys: KeySet | None, version: int) -> Scan:
        state, at = self.log.pinned(version=version)  # one version, as every read (`conch.api.snapshot`)
        return Snapshot(self.log, state, at).scan(*selectors, keys=keys, level=self.level)

    def _records(self, version: int, keys: KeySet | None) -> dict[bytes, tuple[dict[str, Any], dict[int, Any]]]:
        """Records at `version` of `keys` (None: every key): encoded key → (key values, values by
        column id of `self.columns`)."""
        if version == 0:
            return {}
        schema = self.log.state_at(version=version).schema
        by_id = {c.id: c for c in schema.columns}
        cols = [by_id[c.id] for c in self.columns if c.id in by_id]
        scan = self._scan(version, keys, cols=[c.path for c in cols])
        out: dict[bytes, tuple[dict[str, Any], dict[int, Any]]] = {}
        names = [f.name for f in self.key_fields]
        for b in scan.to_record_batches():
            if b.num_rows == 0:
                continue
            enc = encode_keys([b.column(n) for n in names]).to_pylist()
            for k, row in zip(enc, b.to_pylist(), strict=True):
                key = {n: row[n] for n in names}
                out[k] = (key, {c.id: _get(row, c.path) for c in cols})
        return out

    def _diff(
        self, cand: _Candidates, before_v: int, after_v: int, version: int | None = None
    ) -> Iterator[pa.RecordBatch]:
        schema = self.schema
        if cand.full:
            keys_list = sorted(set(self._all_keys(before_v)) | set(self._all_keys(after_v)) | set(cand.seqs))
        else:
            keys_list = sorted(cand.seqs)
        for i in range(0, len(keys_list), CHUNK_KEYS):
            chunk = keys_list[i : i + CHUNK_KEYS]
            self.scanned_keys += len(chunk)
            ks = KeySet(pa.array(chunk, pa.binary()))
            before = self._records(before_v, ks)
            after = self._records(after_v, ks)
            rows = []
            for k in chunk:
                b, a = before.get(k), after.get(k)
                if b is None and a is None:
                    continue
                if b is not None and a is not None:
                    if all(_same(b[1].get(c.id), a[1].get(c.id)) for c in self.columns):
                        continue
                    change = "update"
                else:
                    change = "insert" if b is None else "delete"
                v = version if version is not None else cand.seqs.get(k, after_v)
                key = (a or b)[0]  # type: ignore[index]
                row: dict[str, Any] = {**key, "_change": change, "_version": v, "_time": self._time(v)}
                if self.images != "keys":
                    row.update(_nest(self.columns, a[1] if a else {}))
                if self.images == "before_and_after":
                    row["_before"] = _nest(self.columns, b[1]) if b else None
                rows.append(row)
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)

    def _all_keys(self, version: int) -> list[bytes]:
        if version == 0:
            return []
        names = [f.name for f in self.key_fields]
        out: list[bytes] = []
        for b in self._scan(version, keys_only=True).to_record_batches():
            out += encode_keys([b.column(n) for n in names]).to_pylist()
        return out

    def _time(self, v: int) -> int:
        t = self.times.get(v)
        return t if t is not None else self.log.time_of(v)


def _get(row: dict[str, Any], path: str) -> Any:
    v: Any = row
    for part in path.split("."):
        if v is None:
            return None
        v = v.get(part)
    return v


def _nest(cols: list[Column], values: dict[int, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for c in cols:
        *groups, leaf = c.path.split(".")
        d = out
        for g in groups:
            d = d.setdefault(g, {})
        d[leaf] = values.get(c.id)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return bool(a == b)
