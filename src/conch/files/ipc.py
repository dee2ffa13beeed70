"""Small immutable Arrow tables stored as files: mask files (`conch.files.masks`) and displacement maps
(`conch.maintain.compaction.displacement`). One format: a zstd-compressed Arrow IPC stream.

Displacement maps were written as Arrow IPC *files* (the stream plus a footer) before this
module; `read_table` reads both, so every existing table stays readable.
"""

from __future__ import annotations

import pyarrow as pa

from conch.errors import CorruptFileError

_FILE_MAGIC = b"ARROW1"  # how an Arrow IPC file (not a stream) begins


def table_bytes(table: pa.Table, level: int | None = None) -> bytes:
    """`table` as a zstd-compressed Arrow IPC stream; `level`: zstd's (None: Arrow's default,
    fast; a higher level pays for small files whose patterns repeat)."""
    codec = pa.Codec("zstd", compression_level=level)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression=codec)) as w:
        w.write_table(table)
    return sink.getvalue().to_pybytes()


def read_table(data: bytes, what: str, schema: pa.Schema, stored: pa.Schema | None = None) -> pa.Table:
    """The table in `data` (an IPC stream, or an IPC file), which must have `schema` (or `stored`,
    a form of it written more compactly, cast to `schema`); anything else is a
    `CorruptFileError` naming `what` (e.g. "mask file <path>")."""
    try:
        buf = pa.py_buffer(data)
        t = pa.ipc.open_file(buf).read_all() if data[:6] == _FILE_MAGIC else pa.ipc.open_stream(buf).read_all()
    except (pa.ArrowException, OSError, ValueError) as e:
        raise CorruptFileError(f"{what} is damaged ({e}); restore it from a backup") from e
    if stored is not None and t.schema == stored:
        return t.cast(schema)
    if t.schema != schema:
        raise CorruptFileError(f"{what} is damaged (unexpected columns {t.schema.names}); restore it from a backup")
    return t
