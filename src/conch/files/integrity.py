"""Integrity: checksums recorded where a file is referenced, verified by every read (DESIGN §4).

Damage to a stored file (a flipped bit, a truncation, an edit, a deletion) must surface as a
`CorruptFileError` naming the file, never as a wrong answer. One hash, xxh3 (64-bit), serves every
file kind; measured here at ~25 GB/s against ~0.7 GB/s for `zlib.crc32`, so verifying costs
little next to decoding. Four uses:

- **Vortex files** (fragments and key spaces): a *block table* is appended after the Vortex
  bytes, the xxh3 of every 64 KiB block and a fixed footer (`seal_file`). The file's checksum, the
  digest of that trailer, is recorded in the WAL operation that adds the file
  (`Fragment.checksum`, `KeySpace.checksum`), so it binds every block. `VerifiedReader` shows
  Vortex only the original bytes and checks each block a read touches: a read costs at most one
  extra partial block at each end, never the whole file.
- **Blob files**: every value's xxh3 (low 32 bits) sits in the fragment's blob index beside its
  offset and length, inside the verified Vortex file; a take verifies exactly the values it
  reads (`check_values`). A blob file also ends with its own block table (`seal_file` again),
  whose digest the fragment's footer records (footer v2, `blob_checksum`): a ranged read of part
  of a large value (`conch.files.blobfile`) verifies the 64 KiB blocks it touches, never the
  whole value. Blob files written before that have no table (`blob_checksum` ""): a ranged read
  verifies the value whole once, streamed, on open.
- **Snapshots** (whole small files): `digest(data)` is part of the file's name
  (`with_digest`), which the metastore row registering the snapshot holds; `read_snapshot`
  verifies it. Snapshots are zstd-compressed JSON (`*.zst`, `pack_snapshot`): the per-fragment
  stats (base64 Arrow IPC) repeat their schema bytes, so a snapshot shrinks ~20× (5.4 MB → 0.25
  MB after 3,000 commits) and decompressing costs a fifth of parsing; `.json` ones still read.
- **WAL entries** (metastore rows): `seal_entry` puts the digest of an entry's JSON at its head;
  `open_entry` verifies it and that sequence numbers and commit times follow one another.

Files and entries written before checksums were recorded (checksum "", a snapshot name without
a digest, an entry without a seal) are read unverified: there is nothing to verify them against.
"""

from __future__ import annotations

import functools
import json
import re
import sqlite3
import struct
from collections.abc import Callable, Sequence
from typing import Any, BinaryIO, NamedTuple, TypeVar

import numpy as np
import pyarrow as pa
import xxhash

from conch.errors import CorruptFileError, MetastoreUnavailableError
from conch.files.storage import RangeReader, Storage

BLOCK = 64 << 10  # bytes per verified block of a Vortex file
WRITEBACK = 4 << 20  # bytes a `SealingWriter` writes between writeback hints
PREFIX = "xxh3-"
# payload bytes, blob file bytes, block size, block count, magic
_FOOTER = struct.Struct("<QQII8s")
_MAGIC = b"CONCHXX3"
# v2 (files with a sealed blob file): ..., block count, the blob file's block-table hash, magic
_FOOTER2 = struct.Struct("<QQIIQ8s")
_MAGIC2 = b"CONCHXX4"
_DIGEST = re.compile(r"^xxh3-[0-9a-f]{16}$")
_hash = xxhash.xxh3_64_intdigest


def digest(data: bytes | bytearray | memoryview) -> str:
    """The checksum of `data` as recorded in metadata: `"xxh3-<16 hex digits>"`.

    >>> digest(b"conch")  # doctest: +SKIP
    'xxh3-...'
    """
    return f"{PREFIX}{_hash(data):016x}"


def verify(data: bytes | bytearray | memoryview, checksum: str, name: str) -> None:
    """Raise `CorruptFileError` naming `name` unless `data` hashes to `checksum`
    ("" = nothing recorded: accepted unverified)."""
    if not checksum:
        return
    if not _DIGEST.match(checksum):
        raise CorruptFileError(f"{name}: the recorded checksum {checksum!r} is malformed (damaged metadata)")
    got = digest(data)
    if got != checksum:
        raise CorruptFileError(
            f"{name} is damaged: its contents hash to {got}, the table recorded {checksum}; "
            "restore the file from a copy or a backup"
        )


def value_hashes(data: memoryview, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The low 32 bits of each value's xxh3: what a blob index records per value (one C-level
    `map` over the values: a Python loop body per value cost as much as the hashing)."""
    slices = map(slice, starts.tolist(), (starts + lengths).tolist())
    hashes = np.fromiter(map(_hash, map(data.__getitem__, slices)), dtype=np.uint64, count=len(starts))
    return (hashes & 0xFFFFFFFF).astype(np.uint32)


def check_values(
    data: bytes | memoryview, lengths: np.ndarray, valid: np.ndarray, hashes: np.ndarray, name: str
) -> None:
    """Verify values laid end to end in `data` (null ones have length 0) against their recorded
    hashes; raise `CorruptFileError` naming `name` and the first bad value."""
    ends = np.cumsum(lengths, dtype=np.int64)
    starts = ends - lengths
    got = value_hashes(memoryview(data), starts, np.asarray(lengths, dtype=np.int64))
    bad = np.flatnonzero(np.asarray(valid, dtype=bool) & (got != np.asarray(hashes, dtype=np.uint32)))
    if len(bad):
        i = int(bad[0])
        raise CorruptFileError(
            f"{name} is damaged: value {i} of the read (bytes {starts[i]}..{ends[i]} of it) does not match "
            "its recorded checksum; restore the file from a copy or a backup"
        )


# ----- block-checked files ------------------------------------------------------------------
def seal_file(local_path: str, blob_bytes: int = 0, blob_checksum: str = "") -> str:
    """Append the block table to a freshly written local file (a `Storage.staged` scratch file)
    and return the checksum to record for it. `blob_bytes` is the exact size of the values in
    the fragment's blob file, checked by `Table.check()`; `blob_checksum` the checksum
    `seal_file` returned for that blob file (sealed first), which the footer then binds."""
    hashes = []
    payload = 0
    with open(local_path, "r+b") as f:
        while block := f.read(BLOCK):
            hashes.append(_hash(block))
            payload += len(block)
        trailer = _trailer(hashes, payload, blob_bytes, blob_checksum)
        f.write(trailer)
    return digest(trailer)


def _trailer(hashes: list[int], payload: int, blob_bytes: int, blob_checksum: str) -> bytes:
    table = np.asarray(hashes, dtype="<u8").tobytes()
    if blob_checksum:
        footer = _FOOTER2.pack(payload, blob_bytes, BLOCK, len(hashes), int(blob_checksum[len(PREFIX) :], 16), _MAGIC2)
    else:
        footer = _FOOTER.pack(payload, blob_bytes, BLOCK, len(hashes), _MAGIC)
    return table + footer


class SealingWriter:
    """A file written front to back whose block table is computed from the bytes as they are
    written (`seal` appends it): what `seal_file` makes, without reading the file back (a blob
    file: its values were in memory or streamed through anyway; issue 33). `writeback(fd,
    offset, length)`, if given, gets every `WRITEBACK` bytes written (flushed first): a local
    file's storage starts the disk's writeback there (`LocalStorage.writeback`)."""

    def __init__(self, f: BinaryIO, writeback: Callable[[int, int, int], None] | None = None) -> None:
        self._f = f
        self._hashes: list[int] = []
        self._carry = bytearray()  # the written bytes of the current, unfinished block
        self._payload = 0
        self._writeback = writeback
        self._handed = 0  # bytes handed to `writeback` so far

    def write(self, data: bytes | bytearray | memoryview) -> None:
        mv = memoryview(data).cast("B")
        self._f.write(mv)
        self._payload += len(mv)
        if self._writeback is not None and self._payload - self._handed >= WRITEBACK:
            # the disk starts writing what is written so far while the rest is: the commit's
            # fsync then waits for the tail only (the fsync is still what makes it durable)
            self._f.flush()
            self._writeback(self._f.fileno(), self._handed, self._payload - self._handed)
            self._handed = self._payload
        pos = 0
        if self._carry:
            take = min(BLOCK - len(self._carry), len(mv))
            self._carry += mv[:take]
            pos = take
            if len(self._carry) < BLOCK:
                return
            self._hashes.append(_hash(self._carry))
            self._carry = bytearray()
        end = pos + (len(mv) - pos) // BLOCK * BLOCK
        for at in range(pos, end, BLOCK):
            self._hashes.append(_hash(mv[at : at + BLOCK]))
        self._carry += mv[end:]

    def seal(self) -> str:
        """Append the block table; the checksum to record for the file."""
        if self._carry:
            self._hashes.append(_hash(self._carry))
            self._carry = bytearray()
        trailer = _trailer(self._hashes, self._payload, 0, "")
        self._f.write(trailer)
        return digest(trailer)


class BlockTable(NamedTuple):
    """What a `VerifiedReader` read from a sealed file's end and verified."""

    payload: int
    blob_bytes: int
    block: int
    blob_checksum: str
    hashes: list[int]


class VerifiedReader:
    """A `RangeReader` over a sealed file that verifies every block a read touches.

    It shows only the original bytes (`size()` excludes the block table), so Vortex reads the
    file through it unchanged. Opening reads the block table (one read at the end of the file,
    ~8 bytes per 64 KiB) and checks it against the recorded `checksum`.
    """

    def __init__(self, inner: RangeReader, name: str, checksum: str, known: BlockTable | None = None) -> None:
        self._inner = inner
        self.name = name
        self.failure: CorruptFileError | None = None
        self._hashes: list[int]
        if known is not None:  # the same file's table, read and verified before: no read
            self.payload, self.blob_bytes, self.block, self.blob_checksum, self._hashes = known
            return
        size = inner.size()
        table_max = _FOOTER2.size + 8 * -(-size // BLOCK)
        tail = inner.read_at(max(0, size - table_max), min(size, table_max))
        footer = _FOOTER2 if tail[-8:] == _MAGIC2 else _FOOTER
        if len(tail) < footer.size or tail[-8:] not in (_MAGIC, _MAGIC2):
            raise CorruptFileError(f"{name} is damaged: its block checksums are missing (truncated or overwritten)")
        payload, self.blob_bytes, self.block, n, *blob_sum, _ = footer.unpack(tail[-footer.size :])
        # the checksum of the fragment's blob file's own block table ("": not sealed, see module doc)
        self.blob_checksum = f"{PREFIX}{blob_sum[0]:016x}" if blob_sum else ""
        trailer_len = footer.size + 8 * n
        if self.block <= 0 or payload + trailer_len != size or n != -(-payload // self.block):
            raise CorruptFileError(f"{name} is damaged: it is {size} bytes, its block table describes {payload}")
        trailer = tail[-trailer_len:]
        verify(trailer, checksum, f"{name} (block table)")
        self.payload = payload
        self._hashes = np.frombuffer(trailer, dtype="<u8", count=n).tolist()
        # Vortex turns an exception raised in a read into its own RuntimeError: the reader keeps
        # the real one (`failure`) so the caller can raise it instead.

    def size(self) -> int:
        return self.payload

    def table(self) -> BlockTable:
        """The verified block table, to open the same file again without reading it."""
        return BlockTable(self.payload, self.blob_bytes, self.block, self.blob_checksum, self._hashes)

    def read_at(self, offset: int, length: int) -> bytes | memoryview:
        # a view, not a copy, of the verified blocks (Vortex accepts any buffer)
        end = min(offset + length, self.payload)
        if offset >= end:
            return b""
        first = offset // self.block
        start = first * self.block
        stop = min(-(-end // self.block) * self.block, self.payload)
        data = self._inner.read_at(start, stop - start)
        try:
            if len(data) != stop - start:
                raise CorruptFileError(f"{self.name} is damaged: bytes {start}..{stop} came back short (truncated)")
            self.check_blocks(first, data)
        except CorruptFileError as e:
            self.failure = e
            raise
        return data if (start, stop) == (offset, end) else memoryview(data)[offset - start : end - start]

    def read_into(self, offsets: Sequence[int], lengths: Sequence[int], out: memoryview) -> int:
        pos = 0
        for o, n in zip(offsets, lengths, strict=True):
            data = self.read_at(o, n)
            out[pos : pos + len(data)] = data
            pos += len(data)
            if len(data) < n:
                break
        return pos

    def close(self) -> None:
        self._inner.close()

    def check_blocks(self, first: int, data: bytes) -> None:
        """Verify `data`, the bytes of consecutive whole blocks from block number `first`."""
        mv = memoryview(data)
        for i, pos in enumerate(range(0, len(data), self.block)):
            if _hash(mv[pos : pos + self.block]) != self._hashes[first + i]:
                lo = (first + i) * self.block
                raise CorruptFileError(
                    f"{self.name} is damaged: bytes {lo}..{min(lo + self.block, self.payload)} do not match "
                    "their recorded checksum; restore the file from a copy or a backup"
                )


# ----- whole files named by their digest (snapshots) ------------------------------------------
def with_digest(path: str, data: bytes) -> str:
    """`path` with `data`'s digest before its extension (`x.json` → `x.xxh3-<hex>.json`): the
    name a metastore row registers then records what the file must hash to."""
    stem, dot, ext = path.rpartition(".")
    return f"{stem}.{digest(data)}.{ext}" if dot else f"{path}.{digest(data)}"


def digest_in_name(path: str) -> str:
    """The digest `with_digest` put in a file name ("" for names without one)."""
    m = re.search(r"\.(xxh3-[0-9a-f]{16})(\.[^./]*)?$", path)
    return m.group(1) if m else ""


_PATH_PART = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]{0,254}")
MAX_PATH = 1024


def bad_snapshot_path(path: object, table_id: str | None = None) -> str | None:
    """Why `path` cannot be a snapshot file (of table `table_id`, when given), None if it can:
    a snapshot lies under its table's prefix, and each `/`-separated part is ASCII letters,
    digits, `_`, `.`, `-`, not starting with `.` or `-` (so no `..`, no empty part, no NUL,
    control or non-ASCII character), at most 1024 characters in all. The server refuses such a
    path; a client that finds one registered raises `CorruptFileError` instead of opening it."""
    if not isinstance(path, str):
        return f"a path is text, not {type(path).__name__}"
    if len(path) > MAX_PATH:
        return f"a path has at most {MAX_PATH} characters (this one {len(path)})"
    parts = path.split("/")
    if len(parts) < 2 or (table_id is not None and parts[0] != table_id):
        return f"a snapshot lies under its table's prefix ({table_id or '<table id>'}/)"
    if not all(_PATH_PART.fullmatch(p) for p in parts):
        return "each part of a path is letters, digits, '_', '.', '-' (not starting with '.' or '-')"
    return None


def read_snapshot(storage: Storage, path: str) -> str:
    """The verified text of a snapshot file registered at `path`: missing, damaged, undecodable
    or registered under a path no snapshot can have (`bad_snapshot_path`) is `CorruptFileError`
    naming it."""
    if (why := bad_snapshot_path(path)) is not None:
        raise CorruptFileError(f"snapshot path {path!r} registered in the metastore is invalid: {why}")
    try:
        data = storage.read(path)
    except FileNotFoundError as e:
        raise CorruptFileError(f"snapshot {path} is missing (registered in the metastore, not in storage)") from e
    except (ValueError, IsADirectoryError, NotADirectoryError) as e:  # a name the storage cannot open
        raise CorruptFileError(f"snapshot path {path!r} registered in the metastore cannot be read: {e}") from e
    checksum = digest_in_name(path)
    verify(data, checksum, f"snapshot {path}")
    try:
        if path.endswith(SNAPSHOT_SUFFIX):
            data = pa.CompressedInputStream(pa.BufferReader(data), "zstd").read()
        text = data.decode()
        if not checksum:  # unverified (written before integrity): at least refuse what cannot parse
            json.loads(text)
    except (ValueError, OSError) as e:  # OSError: arrow's zstd refused the bytes
        raise CorruptFileError(f"snapshot {path} is damaged: {e}") from e
    return text


SNAPSHOT_SUFFIX = ".zst"


def pack_snapshot(text: str) -> bytes:
    """A snapshot's file content: its JSON, zstd-compressed (see the module doc)."""
    sink = pa.BufferOutputStream()
    with pa.CompressedOutputStream(sink, "zstd") as out:
        out.write(text.encode())
    return bytes(sink.getvalue().to_pybytes())


# ----- metastore rows (WAL entries, table records) -------------------------------------------
_SEAL = '{"digest":"'
_SEALED_HEAD = len(_SEAL) + len(PREFIX) + 16 + 2  # ..."xxh3-<16 hex>",


def seal_json(text: str) -> str:
    """A JSON object with the digest of its content as its first member, so a changed
    metastore row (a WAL entry, a table's properties) is detected by `open_json`.

    >>> seal_json('{"kind":"write","ops":[]}')  # doctest: +SKIP
    '{"digest":"xxh3-...","kind":"write","ops":[]}'
    """
    if not (text.startswith("{") and text.endswith("}") and len(text) > 2):
        raise ValueError(f"only a non-empty JSON object can be sealed, not {text[:40]!r}")
    return f'{_SEAL}{digest(text.encode())}",{text[1:]}'


def open_json(text: str, name: str) -> Any:
    """The document of a JSON object sealed by `seal_json`, verified; `CorruptFileError` naming
    `name` if it was changed or does not parse. Unsealed text (written before integrity, or
    whose seal itself was damaged, leaving the content intact) is parsed unverified."""
    if text.startswith(_SEAL) and text[_SEALED_HEAD - 2 : _SEALED_HEAD] == '",':
        body = "{" + text[_SEALED_HEAD:]
        verify(body.encode(), text[len(_SEAL) : _SEALED_HEAD - 2], name)
        text = body
    try:
        return json.loads(text)
    except ValueError as e:
        raise CorruptFileError(f"{name} is damaged: {e}") from e


def open_entry(text: str, seq: int, time: int, prev_seq: int, prev_time: int) -> Any:
    """The verified document of WAL entry `seq` (committed at `time`) replayed after entry
    `prev_seq` (at `prev_time`): its seal must match, its sequence number must follow the
    previous one and its commit time must be later (the metastore assigns them that way)."""
    where = f"WAL entry {seq} (a metastore row)"
    if seq != prev_seq + 1 or time <= prev_time:
        raise CorruptFileError(
            f"{where} is damaged: it follows entry {prev_seq} (time {prev_time}) but says seq {seq}, time {time}"
        )
    return open_json(text, where)


# ----- the SQLite metastore file ----------------------------------------------------------------
_C = TypeVar("_C", bound=type)


# SQLite result codes (the low byte) that say the file could not be used just now, not that it is
# damaged: BUSY, LOCKED, PERM, READONLY, NOMEM, INTERRUPT, IOERR, FULL, CANTOPEN, PROTOCOL.
_SQLITE_UNAVAILABLE = frozenset({3, 5, 6, 7, 8, 9, 10, 13, 14, 15})


def sqlite_damage_named(cls: _C) -> _C:
    """Class decorator for a metastore kept in a SQLite file (its `path` attribute): SQLite
    reports a damaged database as a bare `sqlite3.DatabaseError` ("database disk image is
    malformed", "file is not a database"), text that is no longer UTF-8 as
    `sqlite3.OperationalError` ("Could not decode to UTF-8 column ...") or `UnicodeDecodeError`;
    every method raises `CorruptFileError` naming the file instead. A file that cannot be used
    just now (locked, busy, unreadable, disk full) is `MetastoreUnavailableError` naming it;
    constraint violations (`sqlite3.IntegrityError`, which the methods handle) pass through."""

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return fn(self, *args, **kwargs)
            except sqlite3.IntegrityError:
                raise
            except (sqlite3.DatabaseError, UnicodeDecodeError) as e:
                code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                if code in _SQLITE_UNAVAILABLE:
                    raise MetastoreUnavailableError(f"the metastore {self.path} cannot be used now ({e})") from e
                text = str(e)
                if len(text) > 200:  # SQLite quotes the whole undecodable row
                    text = text[:200] + "..."
                raise CorruptFileError(
                    f"the metastore {self.path} is damaged ({text}); restore it from a backup"
                ) from e

        return method

    for name, fn in list(vars(cls).items()):
        if callable(fn) and (not name.startswith("_") or name == "__init__"):
            setattr(cls, name, wrap(fn))
    return cls
