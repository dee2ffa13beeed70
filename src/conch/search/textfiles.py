"""Persisted text index files: a tantivy index per run, and BM25 over their union (issue 31).

**File** (`<table>/idx/<id>.ctx2`, an `IndexFile` like a vector index's: checksummed, built by
`build_indexes` and compaction, verified by `check`, removed by `vacuum`): `CONCHTX2`, the length
of a tar archive (u64 little endian), the archive of the run's tantivy index directory
(`meta.json` and its segments' files), then an Arrow IPC stream of the run's key columns. Each
document holds its text (BM25, and stored: the indexed column of a hit is read from the index),
its row in the keys (`row`: an i64 *fast field*, so a hit's key is a column read, not a stored
document, and indexed, so a set of rows is a tantivy term-set filter) and its run (`run`, stored
and a raw term: a segment's part, and the run a filter clause names).

**Format versions.** The magic names the version; the path's suffix mirrors it so that the
manifest alone tells a current file from an older one. Version 1 (`CONCHTX1`, `.ctx`: `row` and
`run` stored only, the text not stored) is no longer read: `runs.runs_of` treats such a file as
missing, so its run is indexed from its cells at the first query (as a run without a file) and
the next `build_indexes` writes a version 2 file and removes the old one from the manifest
(vacuum deletes it once no retained version references it).

**BM25 statistics are global.** tantivy scores a term with the document count, the average field
length and the term's document frequency of the *whole index it searches*, summed over its
segments. A search therefore never ranks within one run's file: `union` opens one tantivy index
whose `meta.json` lists the segments of every *part* (hard links): a run's file (`extract`), a run
without a current file indexed from its cells (`run_part`), and the fresh records of runs another
run can hide (`fresh_part`); parts are kept per process (LRU), `conch.search.text` says which
parts a version's fresh corpus takes.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from conch.files.integrity import digest
from conch.files.manifest import IndexDef, IndexFile, KeySpace
from conch.files.storage import Storage, new_id
from conch.log.wal import AddIndexFile
from conch.model.deps import optional_import
from conch.model.lru import Lru
from conch.model.sets import distinct
from conch.search.framing import TEXT_SUFFIX, read_frame
from conch.search.runs import run_cells, run_fragments

MAGIC = b"CONCHTX2"
WRITER_HEAP = 64 << 20  # tantivy's indexing buffer: a big run is flushed as several segments
CACHED_FILES = 64  # extracted files kept per process
SHM_FREE = 4 << 30  # free bytes /dev/shm must have to hold this process's parts
FRESH_KEYS = 65_536  # keys per fresh-record scan of overlapped runs


def schema() -> Any:
    """Every text index's tantivy schema: the text (BM25, stored), the row (a fast and indexed
    i64), the run (stored, a raw term)."""
    tantivy = optional_import("tantivy")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=True)
    builder.add_integer_field("row", indexed=True, fast=True)
    builder.add_text_field("run", stored=True, tokenizer_name="raw")
    return builder.build()


def write_index(directory: str, run: str, texts: Iterable[tuple[int, str]]) -> None:
    """A tantivy index of `(row, text)` documents of `run` in `directory` (one commit)."""
    tantivy = optional_import("tantivy")
    index = tantivy.Index(schema(), path=directory)
    writer = index.writer(heap_size=WRITER_HEAP, num_threads=1)
    for row, text in texts:
        writer.add_document(tantivy.Document(text=text, row=row, run=run))
    writer.commit()
    writer.wait_merging_threads()


def encode(directory: str, keys: pa.Table) -> bytes:
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        for name in sorted(os.listdir(directory)):
            if name == "meta.json" or not name.startswith("."):
                tar.add(os.path.join(directory, name), arcname=name)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, keys.schema) as w:
        w.write_table(keys)
    tar_bytes = archive.getvalue()
    return MAGIC + struct.pack("<Q", len(tar_bytes)) + tar_bytes + sink.getvalue().to_pybytes()


def build_file(
    storage: Storage, table_id: str, index: str, run: str, frs: tuple[str, ...], batches: Any
) -> AddIndexFile | None:
    """Write a run's text index file from `(keys, texts)` batches (nulls skipped)."""
    keys: list[pa.Table] = []
    with tempfile.TemporaryDirectory(prefix="conch-text-") as tmp:
        write_index(tmp, run, _documents(batches, keys))
        rows = sum(k.num_rows for k in keys)
        if not rows:
            return None
        data = encode(tmp, pa.concat_tables(keys).combine_chunks())
    fid = new_id()
    path = f"{table_id}/idx/{fid}{TEXT_SUFFIX}"
    storage.write(path, data)
    return AddIndexFile(IndexFile(fid, index, run, path, rows, frs, len(data), digest(data)))


def _documents(batches: Iterable[tuple[pa.Table, pa.Array]], keys: list[pa.Table]) -> Iterator[tuple[int, str]]:
    """`(row, text)` documents of `(keys, texts)` batches, rows counted over all of them (a null
    text is no document but keeps its row); each batch's keys are appended to `keys` as it is read."""
    rows = 0
    for key_table, texts in batches:
        for i, text in enumerate(texts.to_pylist()):
            if text is not None:
                yield rows + i, text
        rows += key_table.num_rows
        keys.append(key_table)


@dataclass(frozen=True, slots=True)
class Extracted:
    """A run's tantivy index on local disk: its directory, its segments, its run (the documents'
    `run`) and its keys (the documents' `row` indexes them)."""

    directory: str
    segments: list[dict[str, Any]]  # its meta.json's segment entries
    run: str
    keys: pa.Table


def _parent() -> str | None:
    """Where parts and unions live: a memory file system when one has room (`SHM_FREE`), since a
    tantivy commit fsyncs and these files are scratch (3x faster to index a part at load 14),
    else the temporary directory."""
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if st.f_bavail * st.f_frsize >= SHM_FREE and os.access("/dev/shm", os.W_OK) else None


_root = tempfile.TemporaryDirectory(prefix="conch-text-cache-", dir=_parent())  # removed when the process exits
# a union's hard links stay readable when a part's directory goes
_parts: Lru[tuple[Any, ...], Extracted] = Lru(
    max_entries=CACHED_FILES, on_evict=lambda old: shutil.rmtree(old.directory, ignore_errors=True)
)


def _cached(ident: tuple[Any, ...], make: Callable[[str], Extracted]) -> Extracted:
    """The part `ident` from this process's cache, else `make(directory)`'s, kept (LRU)."""
    return _parts.get_or_make(ident, lambda: make(tempfile.mkdtemp(prefix="part-", dir=_root.name)))


def extract(storage: Storage, f: IndexFile) -> Extracted:
    """A text index file, verified and unpacked into this process's cache directory."""

    def make(directory: str) -> Extracted:
        payload, keys, _ = read_frame(storage, f, MAGIC, "text index file")
        with tarfile.open(fileobj=io.BytesIO(payload)) as tar:
            tar.extractall(directory, filter="data")
        return _part(directory, f.key_space, keys)

    return _cached(("file", f.id), make)


def run_part(source: Any, definition: IndexDef, key_space: KeySpace) -> Extracted:
    """A run without a current file, indexed now from its cells (kept per process: the run's
    fragments are immutable)."""
    state = source.state
    frs = run_fragments(state, key_space.id, definition.column_id)
    return _cached(
        ("run", key_space.id, definition.column_id, frs),
        lambda directory: _indexed(directory, key_space.id, run_cells(source, state, definition, key_space.id)),
    )


def fresh_part(source: Any, column: Any, directory: str, covered: list[pa.Table], held: list[pa.Table]) -> Extracted:
    """The fresh non-null cells of `column` of the keys in `held` (the overlapped runs' keys) that
    no part in `covered` (the other runs' keys) holds, read from the table version in batches of
    `FRESH_KEYS` keys and indexed now in `directory` (this part belongs to one version only)."""
    key_schema = pa.schema(source.state.schema.key_fields(column.level))
    keys = [f.name for f in key_schema]
    rest = pa.concat_tables([t.select(keys).cast(key_schema) for t in held]).group_by(keys).aggregate([])
    known = [t.select(keys).cast(key_schema) for t in covered if t.num_columns]
    if known:
        rest = rest.join(pa.concat_tables(known), keys=keys, join_type="left anti")
    rest = rest.sort_by([(n, "ascending") for n in keys])

    def batches() -> Iterable[tuple[pa.Table, pa.Array]]:
        for start in range(0, rest.num_rows, FRESH_KEYS):
            wanted = rest.slice(start, FRESH_KEYS)
            for batch in source.scan(column.path, keys=wanted, level=column.level).to_record_batches():
                yield (
                    pa.Table.from_batches([batch]).select(keys),
                    batch.column(batch.schema.get_field_index(column.path)),
                )

    return _indexed(os.path.join(directory, "fresh"), "fresh", batches())


def _indexed(directory: str, run: str, batches: Iterable[tuple[pa.Table, pa.Array]]) -> Extracted:
    """`(keys, texts)` batches indexed in `directory` as a part (nulls skipped, rows kept)."""
    os.makedirs(directory, exist_ok=True)
    keys: list[pa.Table] = []
    write_index(directory, run, _documents(batches, keys))
    return _part(directory, run, pa.concat_tables(keys).combine_chunks() if keys else None)


def _part(directory: str, run: str, keys: pa.Table | None) -> Extracted:
    with open(os.path.join(directory, "meta.json")) as meta:
        segments = json.load(meta)["segments"]
    return Extracted(directory, segments, run, keys if keys is not None else pa.table({}))


def version_identity(state: Any, definition: IndexDef) -> tuple[Any, ...]:
    """What a version's fresh corpus of a column depends on: its runs and their fragments."""
    return (definition.column_id, tuple(sorted(state.key_spaces)), tuple(sorted(state.fragments)))


def new_directory() -> str:
    """A directory for one union (and its fresh part), under this process's cache directory."""
    return tempfile.mkdtemp(prefix="union-", dir=_root.name)


@dataclass(frozen=True, slots=True)
class Corpus:
    """An opened union of parts: what `search_text` ranks over."""

    index: Any
    searcher: Any  # the union never changes: one searcher serves every query
    keys: dict[str, pa.Table]  # a document's run → the keys its row indexes
    segment_runs: list[str]  # a segment's ordinal → the run of its part
    directory: str
    what: str

    def positions(self, addresses: list[Any]) -> tuple[np.ndarray, np.ndarray]:
        """`(segment ordinals, rows)` of hit documents: the `row` fast field, no stored document
        read (a segment's part is `segment_runs[ordinal]`)."""
        if len(self.segment_runs) == 1:
            ords = np.zeros(len(addresses), np.int64)
        else:
            ords = np.fromiter((a.segment_ord for a in addresses), np.int64, len(addresses))
        return ords, np.asarray(self.searcher.fast_field_values("row", addresses), np.int64)

    def keys_of(self, ords: np.ndarray, rows: np.ndarray) -> list[tuple[Any, ...]]:
        """The keys at those positions, one `take` per part."""
        out: list[tuple[Any, ...]] = [()] * len(rows)
        for ordinal in distinct(ords).tolist():
            mine = np.flatnonzero(ords == ordinal)
            taken = self.keys[self.segment_runs[ordinal]].take(pa.array(rows[mine]))
            for i, kt in zip(mine.tolist(), zip(*(c.to_pylist() for c in taken.columns))):
                out[i] = kt
        return out

    def texts_of(self, addresses: list[Any]) -> list[str]:
        """The indexed texts of hit documents (stored in the index: the fresh cells)."""
        return [self.searcher.doc(a)["text"][0] for a in addresses]

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)


def union(parts: list[Extracted], what: str, directory: str) -> Corpus:
    """One tantivy index in `directory` over every segment of `parts` (hard links, else copies):
    BM25 statistics summed over all of them (module doc)."""
    tantivy = optional_import("tantivy")
    index_dir = os.path.join(directory, "index")
    os.makedirs(index_dir)
    segments = []
    for part in parts:
        for name in os.listdir(part.directory):
            if name != "meta.json" and not name.startswith("."):
                src, dst = os.path.join(part.directory, name), os.path.join(index_dir, name)
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copyfile(src, dst)
        segments += part.segments
    if parts:
        with open(os.path.join(parts[0].directory, "meta.json")) as f:
            meta = json.load(f)
        meta["segments"] = segments
        with open(os.path.join(index_dir, "meta.json"), "w") as f:
            json.dump(meta, f)
        index = tantivy.Index.open(index_dir)
    else:  # no run holds the column: an empty index of the same schema
        index = tantivy.Index(schema(), path=index_dir)
    index.reload()
    searcher = index.searcher()
    # a segment holds one part's documents (tantivy never merges a union's segments): its first
    # document names the part
    runs = [searcher.doc(tantivy.DocAddress(i, 0))["run"][0] for i in range(searcher.num_segments)]
    return Corpus(index, searcher, {p.run: p.keys for p in parts}, runs, directory, what)
