"""`Table.check()` and `conch check TABLE`: verify everything a table's answers depend on.

Reads every byte of every live file against the checksums recorded for it (`conch.files.integrity`):
the table's metastore record and WAL entries, every registered snapshot, every live key space
and fragment file (once, however many masked fragments share it), every value of their blob files,
and every mask file. It reports what is damaged instead of
stopping at the first problem, and changes nothing.

Files written before checksums were recorded (checksum "") can only be decoded, not verified:
they are counted as `unverified`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from conch.errors import ConchError, CorruptFileError
from conch.files.blobs import BLOB_SUFFIX
from conch.files.format import FileRef, FragmentFormat, column_name
from conch.files.integrity import open_entry, open_json, read_snapshot, verify
from conch.files.manifest import TableState
from conch.files.masks import verify_mask
from conch.files.storage import Storage
from conch.log.metastore.base import Metastore
from conch.log.wal import replay
from conch.maintain.compaction.timeorder import interleaved, oldest_time
from conch.model.schema import Schema


@dataclass(frozen=True, slots=True)
class Problem:
    """One damaged thing: the file (or metastore row) and what is wrong with it."""

    file: str
    what: str

    def __str__(self) -> str:
        return f"{self.file}: {self.what}"


@dataclass
class CheckReport:
    """What `Table.check()` verified and what it found damaged (`ok` if nothing).

    >>> report = t.check()  # doctest: +SKIP
    >>> report.ok, report.files_checked, [str(p) for p in report.problems]  # doctest: +SKIP
    (True, 12, [])
    """

    table: str
    files_checked: int = 0
    bytes_checked: int = 0
    entries_checked: int = 0  # WAL entries (metastore rows)
    unverified: int = 0  # files with no recorded checksum (written before integrity): decoded only
    problems: list[Problem] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        head = (
            f"table {self.table!r}: {self.files_checked} files ({self.bytes_checked} bytes) and "
            f"{self.entries_checked} WAL entries checked, {self.unverified} files without checksums; "
            + ("no problems" if self.ok else f"{len(self.problems)} problem(s)")
        )
        return "\n".join([head, *(str(p) for p in self.problems)])


def check_table(
    name: str, table_id: str, props: str, metastore: Metastore, storage: Storage, fmt: FragmentFormat
) -> CheckReport:
    """Verify table `name` (id `table_id`, metastore record properties `props`); never raises
    for damage, reports it."""
    report = CheckReport(name)
    where = getattr(metastore, "path", "the metastore")  # the file a SQLite metastore lives in
    try:
        report.problems += [Problem(where, p) for p in metastore.check()]
        schema = Schema.from_json(open_json(props, f"the metastore record of table {name!r}")["schema"])
        entries = metastore.read_log(table_id)
    except (CorruptFileError, KeyError) as err:
        report.problems.append(Problem(where, str(err)))
        return report
    # Every entry on its own (all damage is reported, not only the first), then the live files
    # from a replay of the whole WAL: snapshots are a cache of it, checked separately.
    state: TableState | None = TableState(schema)
    prev_seq, prev_time = 0, 0
    for e in entries:
        report.entries_checked += 1
        try:
            open_entry(e.entry, e.seq, e.time, prev_seq, prev_time)
        except CorruptFileError as err:
            report.problems.append(Problem(where, str(err)))
            state = None
        prev_seq, prev_time = e.seq, e.time
    if state is not None:
        try:
            state = replay(state, entries)
        except (ConchError, KeyError, TypeError, ValueError) as err:  # an entry whose content is wrong
            report.problems.append(Problem(where, f"the WAL does not replay: {err}"))
            state = None
    _check_snapshots(report, table_id, metastore, storage)
    if state is None:
        report.problems.append(Problem(name, "the live files are unknown (the WAL is damaged): files not checked"))
        return report
    report.problems += [
        Problem(
            a.path,
            f"run {a.id} (level {a.level or 'root'!r}, {a.kind}, times {oldest_time(a)}..{a.time}) and run {b.id} "
            f"({b.kind}, times {oldest_time(b)}..{b.time}) share keys and interleave in commit time: a compaction "
            "relabelled cells past a newer cell or deletion (issue 29), so keys in both may read deleted or stale "
            "cells; delete and rewrite those keys (the WAL's retained entries show what they held)",
        )
        for a, b in interleaved(state)
    ]
    refs: list[tuple[FileRef, list[str]]] = [(ks, []) for ks in state.key_spaces.values()]
    # masked fragments share data files: each file is checked once (with every blob column any
    # of its fragments reads), and each fragment's own mask file
    blob_ids: dict[str, set[int]] = {}
    for fr in state.fragments.values():
        if fr.path not in blob_ids:
            refs.append((fr, []))
        blob_ids.setdefault(fr.path, set()).update(fr.blob_columns)
    refs = [(r, [column_name(c) for c in sorted(blob_ids.get(r.path, ()))]) for r, _ in refs]
    for fr in state.fragments.values():
        if fr.mask:
            report.files_checked += 1
            report.unverified += 0 if fr.mask_checksum else 1
            try:
                report.bytes_checked += verify_mask(storage, fr.mask, fr.mask_checksum, fr.rows, fr.start)
            except CorruptFileError as err:
                report.problems.append(Problem(fr.mask, str(err)))
    for ix in state.index_files.values():  # search index files (`conch.search.runs`): one digest each
        report.files_checked += 1
        try:
            data = storage.read(ix.path)
            verify(data, ix.checksum, ix.path)
            report.bytes_checked += len(data)
        except FileNotFoundError:
            report.problems.append(Problem(ix.path, f"index file {ix.path} is missing"))
        except CorruptFileError as err:
            report.problems.append(Problem(ix.path, str(err)))
    for ref, blobs in refs:
        report.files_checked += 1 + (1 if blobs else 0)
        report.unverified += 0 if ref.checksum else 1 + (1 if blobs else 0)
        try:
            report.bytes_checked += fmt.verify_file(ref, blobs)
        except CorruptFileError as err:
            blob = str(err).startswith(ref.path + BLOB_SUFFIX)
            report.problems.append(Problem(ref.path + BLOB_SUFFIX if blob else ref.path, str(err)))
    return report


def _check_snapshots(report: CheckReport, table_id: str, metastore: Metastore, storage: Storage) -> None:
    seq: int | None = None
    while True:
        try:
            snap = metastore.latest_snapshot(table_id, seq)
        except CorruptFileError as err:
            report.problems.append(Problem(getattr(metastore, "path", "the metastore"), str(err)))
            return
        if snap is None:
            return
        report.files_checked += 1
        try:
            text = read_snapshot(storage, snap[1])
            report.bytes_checked += len(text)
            TableState.from_json(text)
        except (CorruptFileError, KeyError, TypeError) as err:
            report.problems.append(Problem(snap[1], str(err)))
        if snap[0] <= 0:
            return
        seq = snap[0] - 1
