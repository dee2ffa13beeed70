"""Persisted text index files: a tantivy index per run, and BM25 over their union (issue 31).

**File** (`<table>/idx/<id>.ctx`, an `IndexFile` like a vector index's: checksummed, built by
`build_indexes` and compaction, verified by `check`, removed by `vacuum`): `CONCHTX1`, the length
of a tar archive (u64 little endian), the archive of the run's tantivy index directory
(`meta.json` and its segments' files), then an Arrow IPC stream of the run's key columns; each
document stores its row there (`row`) and its run (`run`).

**BM25 statistics are global.** tantivy scores a term with the document count, the average field
length and the term's document frequency of the *whole index it searches*, summed over its
segments. A search therefore never ranks within one run's file: it opens one tantivy index whose
`meta.json` lists the segments of every run's file (hard links to the extracted files, cached per
process) plus, for runs without a current file, a segment built at query time from their cells,
so every statistic is the sum over all documents: exactly what tantivy computes over the same
corpus indexed at once (tested). That equals the fresh corpus only while no run can hide another
run's cell (`query.hiders`: no overlapping newer run, no tombstone) and no `where` narrows the
corpus; otherwise `search_text` takes the exact path (the fresh records, indexed at query time).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import struct
import tarfile
import tempfile
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from conch.errors import CorruptFileError
from conch.files.integrity import digest, verify
from conch.files.manifest import IndexFile
from conch.files.storage import Storage, new_id
from conch.log.wal import AddIndexFile
from conch.model.deps import optional_import

MAGIC = b"CONCHTX1"
WRITER_HEAP = 64 << 20  # tantivy's indexing buffer: a big run is flushed as several segments
CACHED_FILES = 64  # extracted files kept per process


def schema() -> Any:
    """Every text index's tantivy schema: the text (BM25), the row, the run (stored)."""
    tantivy = optional_import("tantivy")
    builder = tantivy.SchemaBuilder()
    builder.add_text_field("text", stored=False)
    builder.add_unsigned_field("row", stored=True)
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
    rows = 0

    def docs() -> Iterable[tuple[int, str]]:
        nonlocal rows
        for key_table, texts in batches:
            for i, text in enumerate(texts.to_pylist()):
                if text is not None:
                    yield rows + i, text
            rows += key_table.num_rows
            keys.append(key_table)

    with tempfile.TemporaryDirectory(prefix="conch-text-") as tmp:
        write_index(tmp, run, docs())
        if not rows:
            return None
        data = encode(tmp, pa.concat_tables(keys).combine_chunks())
    fid = new_id()
    path = f"{table_id}/idx/{fid}.ctx"
    storage.write(path, data)
    return AddIndexFile(IndexFile(fid, index, run, path, rows, frs, len(data), digest(data)))


@dataclass(frozen=True, slots=True)
class Extracted:
    directory: str
    segments: list[dict[str, Any]]  # its meta.json's segment entries
    keys: pa.Table


_root = tempfile.TemporaryDirectory(prefix="conch-text-cache-")  # removed when the process exits
_cache: OrderedDict[str, Extracted] = OrderedDict()
_lock = threading.Lock()


def cache_root() -> str:
    """This process's directory of extracted files and kept unions (removed at exit)."""
    return _root.name


def extract(storage: Storage, f: IndexFile) -> Extracted:
    """A text index file, verified and unpacked into this process's cache directory."""
    with _lock:
        hit = _cache.get(f.id)
        if hit is not None:
            _cache.move_to_end(f.id)
            return hit
    data = storage.read(f.path)
    if f.checksum:
        verify(data, f.checksum, f.path)
    if data[:8] != MAGIC:
        raise CorruptFileError(f"text index file {f.path} does not start with {MAGIC!r}")
    (n,) = struct.unpack("<Q", data[8:16])
    directory = os.path.join(_root.name, f.id)
    shutil.rmtree(directory, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(data[16 : 16 + n])) as tar:
        tar.extractall(directory, filter="data")
    keys = pa.ipc.open_stream(pa.py_buffer(memoryview(data)[16 + n :])).read_all()
    out = extracted_dir(directory, keys)
    with _lock:
        _cache[f.id] = out
        while len(_cache) > CACHED_FILES:
            _, old = _cache.popitem(last=False)
            shutil.rmtree(old.directory, ignore_errors=True)
    return out


def extracted_dir(directory: str, keys: pa.Table) -> Extracted:
    """An index written by `write_index` into `directory`, as a part of a `union`."""
    with open(os.path.join(directory, "meta.json")) as meta:
        return Extracted(directory, json.load(meta)["segments"], keys)


def union(parts: list[Extracted], directory: str) -> Any:
    """One tantivy index in `directory` over every segment of `parts` (hard links, else copies):
    BM25 statistics summed over all of them (module doc)."""
    tantivy = optional_import("tantivy")
    segments = []
    meta: dict[str, Any] | None = None
    for part in parts:
        with open(os.path.join(part.directory, "meta.json")) as f:
            meta = meta or json.load(f)
        for name in os.listdir(part.directory):
            if name != "meta.json" and not name.startswith("."):
                src, dst = os.path.join(part.directory, name), os.path.join(directory, name)
                try:
                    os.link(src, dst)
                except OSError:
                    shutil.copyfile(src, dst)
        segments += part.segments
    assert meta is not None
    meta["segments"] = segments
    with open(os.path.join(directory, "meta.json"), "w") as f:
        json.dump(meta, f)
    return tantivy.Index.open(directory)
