"""Hugging Face `datasets` in and out of Conch (docs/media.md).

>>> t = conch.engines.hf.write(cat, ds, table="cifar")  # a Dataset, IterableDataset or DatasetDict  # doctest: +SKIP
>>> it = conch.engines.hf.dataset(t.scan(where=t["split"] == "train"))  # a datasets.IterableDataset  # doctest: +SKIP

**Splits are a key column.** Every row gets a leading `split` key column (the DatasetDict's
split name; a lone Dataset's `split` or "train"), then the dataset's own `key` column(s), or
`idx` (the row's position in its split) without one. One table holds every split, a split is
a key range (`where=t["split"] == "test"` reads only its key spaces), and writing a split again
upserts its rows. Tables per split would make a second name to keep in step with the first.

**Features.** Image and Audio columns become column groups: `bytes` (out of line, read as
files by `Scan.blob_files`), `path`, and metadata read from the header: `width`, `height`,
`format` for images (Pillow, if installed), `sampling_rate`, `channels` for audio (the
feature's rate, else a WAV header's). A value stored as a path only is read from that path.
Other features are stored as their Arrow type (ClassLabel as its integer). When `write` creates
the table (a `Catalog` target), the dataset's `Features` are kept with it
(`Table.properties["hf.features"]`), and `dataset` hands them back exactly (`ClassLabel` names
included); for other tables they are inferred: an image-shaped group is `Image()`, an
audio-shaped one `Audio()`, the rest from Arrow types.

**Out.** `dataset(scan)` is an Arrow-backed `IterableDataset` whose shards are the scan's splits
(`Scan.splits`: picklable key ranges), so `datasets`/torch workers each read their own, each
streaming its record batches as Arrow tables in the features' types.

Writes are one commit, streamed in batches of `batch_rows` (bounded memory) with a progress bar.
"""

from __future__ import annotations

import functools
import importlib.util
import io
import itertools
import json
import struct
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conch.api.catalog import Catalog
from conch.api.snapshot import Snapshot
from conch.api.table import Table
from conch.errors import InvalidArgumentError
from conch.model.deps import optional_import
from conch.scan import Scan, Split

SPLIT = "split"
INDEX = "idx"
FEATURES = "hf.features"
_IMAGE = pa.struct(
    [
        ("bytes", pa.binary()),
        ("path", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("format", pa.string()),
    ]
)
_AUDIO = pa.struct(
    [("bytes", pa.binary()), ("path", pa.string()), ("sampling_rate", pa.int32()), ("channels", pa.int32())]
)

__all__ = ["dataset", "write"]


def _datasets() -> Any:
    return optional_import("datasets")


# ----- in ----------------------------------------------------------------------------------
def write(
    target: Table | Catalog,
    dataset: Any,
    key: str | Sequence[str] | None = None,
    table: str | None = None,
    batch_rows: int = 1000,
    progress: bool | None = None,
) -> Table:
    """Write a `datasets.Dataset`, `IterableDataset` or `DatasetDict` into a table (module doc)
    in one commit; returns the table. `target`: a `Table`, or a `Catalog` and the `table` name to
    create (or reuse). `key`: the dataset's own key column(s), unique within a split (default:
    the row's position, `idx`)."""
    ds = _datasets()
    splits = _splits(ds, dataset)
    features = splits[0][1].features
    if features is None:
        raise InvalidArgumentError("hf.write: the dataset has no features (an IterableDataset of unknown columns)")
    for name, part in splits[1:]:
        if part.features != features:
            raise InvalidArgumentError(f"hf.write: split {name!r} has other features than split {splits[0][0]!r}")
    keys = [key] if isinstance(key, str) else list(key or [])
    missing = [k for k in keys if k not in features]
    if missing:
        raise InvalidArgumentError(f"hf.write: key columns {missing} are not in the dataset ({list(features)})")
    if isinstance(target, Catalog):
        if not table:
            raise InvalidArgumentError("hf.write(catalog, dataset, table=...): name the table to create")
        key_fields = [(SPLIT, pa.string())] + (
            [(k, features.arrow_schema.field(k).type) for k in keys] if keys else [(INDEX, pa.uint64())]
        )
        props = {FEATURES: json.dumps(features.to_dict())}
        target = target.create_table(table, key_fields, exist_ok=True, properties=props)
    batches = (
        _to_conch(batch, features, name, start, keys, ds)
        for name, part in splits
        for start, batch in _arrow_batches(part, batch_rows)
    )
    first = next(batches, None)
    if first is None:
        return target
    reader = pa.RecordBatchReader.from_batches(first.schema, itertools.chain([first], batches))
    target.write(reader, progress=progress)
    return target


def _splits(ds: Any, dataset: Any) -> list[tuple[str, Any]]:
    if isinstance(dataset, ds.DatasetDict | ds.IterableDatasetDict):
        if not dataset:
            raise InvalidArgumentError("hf.write: the DatasetDict has no splits")
        return [(str(name), part) for name, part in dataset.items()]
    if isinstance(dataset, ds.Dataset | ds.IterableDataset):
        return [(str(dataset.split) if dataset.split is not None else "train", dataset)]
    raise InvalidArgumentError(
        f"hf.write takes a datasets Dataset, IterableDataset or DatasetDict, not {type(dataset).__name__}"
    )


def _arrow_batches(part: Any, batch_rows: int) -> Iterator[tuple[int, pa.Table]]:
    """(first row, Arrow table) of each batch, undecoded (images stay bytes + path)."""
    start = 0
    for batch in part.with_format("arrow").iter(batch_size=batch_rows):
        yield start, batch
        start += batch.num_rows


def _to_conch(batch: pa.Table, features: Any, split: str, start: int, keys: list[str], ds: Any) -> pa.RecordBatch:
    n = batch.num_rows
    cols: dict[str, pa.Array] = {SPLIT: pa.repeat(pa.scalar(split, pa.string()), n)}
    if not keys:
        cols[INDEX] = pa.array(np.arange(start, start + n, dtype=np.uint64))
    for name, feat in features.items():
        chunked = batch.column(name)  # one chunk as a rule: used as it is, not copied
        col = chunked.chunk(0) if chunked.num_chunks == 1 else chunked.combine_chunks()
        if isinstance(feat, ds.Image):
            cols[name] = _media(col, _image_meta, _IMAGE)
        elif isinstance(feat, ds.Audio):
            cols[name] = _media(col, functools.partial(_audio_meta, rate=feat.sampling_rate), _AUDIO)
        else:
            cols[name] = col
    return pa.RecordBatch.from_arrays(list(cols.values()), names=list(cols))


def _media(col: pa.Array, meta: Any, t: pa.StructType) -> pa.Array:
    """An Image/Audio storage column (struct of bytes, path) with the value's bytes (read from
    its path where only that is stored) and its header metadata (`meta` of each value's bytes)."""
    data, paths = col.field("bytes"), col.field("path")
    if col.null_count:
        data, paths = pc.if_else(col.is_valid(), data, None), pc.if_else(col.is_valid(), paths, None)
    if data.null_count and paths.null_count < len(paths):
        missing = np.flatnonzero(
            np.asarray(data.is_null().to_numpy(zero_copy_only=False)) & paths.is_valid().to_numpy(zero_copy_only=False)
        )
        if len(missing):  # stored as a path only: the file's bytes
            values = data.to_pylist()
            for i in missing.tolist():
                values[i] = Path(paths[i].as_py()).read_bytes()
            data = pa.array(values, pa.binary())
    if isinstance(data, pa.ChunkedArray):
        data = data.combine_chunks()
    if data.type != pa.binary():
        data = data.cast(pa.binary())
    png = _png_sizes(data) if t == _IMAGE else None
    rest: Sequence[int] = range(len(data)) if png is None else np.flatnonzero(~png[0]).tolist()
    metas = {i: meta(data[i].as_buffer()) for i in rest if data[i].is_valid}
    fields = [data, paths if paths.type == pa.string() else paths.cast(pa.string())]
    for f in list(t)[2:]:
        if png is not None and not metas:  # every value a PNG (or null): Arrow from NumPy, no Python per row
            fields.append(_png_field(png, f))
            continue
        values = np.full(len(data), None, dtype=object)
        if png is not None:
            values[png[0]] = _png_field(png, f).filter(pa.array(png[0])).to_pylist()
        for i, m in metas.items():
            values[i] = m.get(f.name)
        fields.append(pa.array(values, f.type))
    return pa.StructArray.from_arrays(fields, fields=list(t), mask=col.is_null() if col.null_count else None)


def _png_field(png: tuple[np.ndarray, np.ndarray, np.ndarray], f: pa.Field) -> pa.Array:
    """Field `f` (width, height or format) of an image column from `_png_sizes`: null where a
    value is not a PNG."""
    ok, width, height = png
    everywhere = bool(ok.all())
    if f.name == "format":
        png_ = pa.scalar("PNG", pa.string())
        return pa.repeat(png_, len(ok)) if everywhere else pc.if_else(pa.array(ok), png_, pa.scalar(None, pa.string()))
    return pa.array((width if f.name == "width" else height).astype(np.int32), mask=None if everywhere else ~ok)


_PNG = np.frombuffer(b"\x89PNG\r\n\x1a\n", dtype="<u8")[0]


def _png_sizes(data: pa.Array) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(is a PNG, width, height) of every value of a binary array, vectorised (IHDR is at a
    fixed offset): most image datasets are PNGs, and one Python call per image was most of
    an ingest's time."""
    n = len(data)
    offsets = np.frombuffer(data.buffers()[1], dtype=np.int32, count=n + 1, offset=4 * data.offset)
    body = data.buffers()[2]
    buf = np.frombuffer(body, dtype=np.uint8) if body is not None else np.zeros(0, np.uint8)
    if len(buf) < 24:
        return np.zeros(n, dtype=bool), np.zeros(n, np.int64), np.zeros(n, np.int64)
    ok = np.diff(offsets) >= 24
    if data.null_count:
        ok &= np.asarray(data.is_valid().to_numpy(zero_copy_only=False))
    at = np.where(ok, offsets[:-1].astype(np.int64), 0)
    head = buf[np.minimum(at[:, None] + np.arange(24), len(buf) - 1)]  # each value's first 24 bytes
    ok &= np.ascontiguousarray(head[:, :8]).view("<u8")[:, 0] == _PNG
    size = np.ascontiguousarray(head[:, 16:24]).view(">u4").astype(np.int64)  # IHDR width, height
    return ok, size[:, 0], size[:, 1]


def _image_meta(data: Any) -> dict[str, Any]:
    """Width, height and format from an image's header: PNG, GIF, BMP and JPEG parsed here
    (microseconds), other formats by Pillow when installed."""
    b = memoryview(data)
    head = bytes(b[:32])
    if head[:8] == b"\x89PNG\r\n\x1a\n" and len(head) >= 24:
        w, h = struct.unpack(">II", head[16:24])
        return {"width": w, "height": h, "format": "PNG"}
    if head[:4] in (b"GIF8",) and len(head) >= 10:
        w, h = struct.unpack("<HH", head[6:10])
        return {"width": w, "height": h, "format": "GIF"}
    if head[:2] == b"BM" and len(head) >= 26:
        w, h = struct.unpack("<ii", head[18:26])
        return {"width": w, "height": abs(h), "format": "BMP"}
    if head[:2] == b"\xff\xd8":
        jpeg = _jpeg_size(b)
        if jpeg is not None:
            return {"width": jpeg[0], "height": jpeg[1], "format": "JPEG"}
    try:
        image = optional_import("PIL.Image")
        with image.open(io.BytesIO(b)) as img:  # the header only: nothing is decoded
            return {"width": img.width, "height": img.height, "format": img.format}
    except Exception:  # no Pillow, or bytes it cannot open: the bytes are kept, metadata null
        return {}


def _jpeg_size(b: memoryview) -> tuple[int, int] | None:
    """(width, height) from a JPEG's start-of-frame marker (None: not found)."""
    pos, n = 2, len(b)
    while pos + 9 < n:
        if b[pos] != 0xFF:
            return None
        marker = b[pos + 1]
        if marker == 0xFF:  # fill byte
            pos += 1
            continue
        size = (b[pos + 2] << 8) | b[pos + 3]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = (b[pos + 5] << 8) | b[pos + 6], (b[pos + 7] << 8) | b[pos + 8]
            return w, h
        pos += 2 + size
    return None


def _audio_meta(data: Any, rate: int | None) -> dict[str, Any]:
    data = bytes(memoryview(data)[:4096])  # the header
    out: dict[str, Any] = {"sampling_rate": rate}
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        pos = 12
        while pos + 8 <= len(data):
            cid, size = data[pos : pos + 4], struct.unpack_from("<I", data, pos + 4)[0]
            if cid == b"fmt " and size >= 16:
                channels, wav_rate = struct.unpack_from("<HI", data, pos + 10)
                return {"sampling_rate": rate or wav_rate, "channels": channels}
            pos += 8 + size + (size & 1)
    return out


# ----- out ---------------------------------------------------------------------------------
def dataset(source: Scan | Snapshot | Table, n_shards: int | None = None) -> Any:
    """A `datasets.IterableDataset` of a scan's records (a snapshot or table: all of it), one
    shard per split of the scan (`Scan.splits(n_shards)`), with typed features (module doc).
    Image and Audio values come back as `{"bytes", "path"}` (what those features decode; the
    path's file name only, as `datasets` embeds files: the table's `path` column has it whole).
    `datasets` decodes `Audio` values with `torchcodec` (the `torch` extra; it needs FFmpeg's
    libraries): without it installed, audio columns are typed as that struct of `bytes` and
    `path` (cast them once it is there).

    It is Arrow-backed: each shard streams its split's record batches (`Split.to_record_batches`,
    one batch in memory at a time), converted to the features' Arrow types column by column, so
    `.with_format("arrow")`, `.iter(batch_size=...)` and batched `.map` see Arrow tables without a
    Python object per row, and rows are formatted a batch at a time. (`datasets` builds its own
    `from_polars` this way: `ArrowExamplesIterable` is not exported at the top of `datasets`.)"""
    ds = _datasets()
    from datasets.iterable_dataset import ArrowExamplesIterable

    scan = source if isinstance(source, Scan) else source.scan()
    features = _features(ds, scan)
    if importlib.util.find_spec("torchcodec") is None:  # datasets encodes Audio with torchcodec only
        storage = {"bytes": ds.Value("binary"), "path": ds.Value("string")}
        features = ds.Features({n: storage if isinstance(f, ds.Audio) else f for n, f in features.items()})
    media = tuple(n for n, f in features.items() if isinstance(f, ds.Image | ds.Audio))
    kwargs = {"splits": scan.splits(n_shards), "schema": features.arrow_schema, "media": media}
    return ds.IterableDataset(ArrowExamplesIterable(_tables, kwargs), info=ds.DatasetInfo(features=features))


def _features(ds: Any, scan: Scan) -> Any:
    schema = scan.schema
    log = getattr(scan.source, "log", None)
    kept = log.properties.get(FEATURES) if log is not None else None
    if kept:
        stored = ds.Features.from_dict(json.loads(kept))
        return ds.Features({n: f for n, f in stored.items() if n in schema.names})
    out = {}
    for field in schema:
        if field.name in (SPLIT, INDEX):
            continue
        if _shaped(field.type, _IMAGE):
            out[field.name] = ds.Image()
        elif _shaped(field.type, _AUDIO):
            out[field.name] = ds.Audio()
        else:
            out[field.name] = ds.Features.from_arrow_schema(pa.schema([field]))[field.name]
    return ds.Features(out)


def _shaped(t: pa.DataType, like: pa.StructType) -> bool:
    return pa.types.is_struct(t) and {f.name for f in t} == {f.name for f in like}


def _tables(
    splits: list[Split], schema: pa.Schema, media: tuple[str, ...]
) -> Iterator[tuple[tuple[int, int], pa.Table]]:
    """One shard's Arrow tables (its splits' record batches in the features' `schema`), keyed by
    (split, batch): `ArrowExamplesIterable`'s generator (picklable arguments, for workers)."""
    for i, split in enumerate(splits):
        for j, batch in enumerate(split.to_record_batches()):
            yield (i, j), _hf_table(batch, schema, media)


def _hf_table(batch: pa.RecordBatch, schema: pa.Schema, media: tuple[str, ...]) -> pa.Table:
    """A scan's batch as `datasets` stores it: media columns as `{bytes, path}` structs (the
    path's file name only, as `datasets` embeds files: a full local path would make it reference
    the file instead of the stored bytes), the rest cast to the features' Arrow types."""
    cols = []
    for field in schema:
        col = batch.column(field.name)
        if field.name in media:
            data, path = col.field("bytes"), col.field("path")
            # a group of columns has no null of its own: a value with neither bytes nor a path
            # was a null image (what `datasets` cannot decode otherwise)
            mask = pc.and_(data.is_null(), path.is_null())
            path = pc.replace_substring_regex(path, r"^.*/", "")
            col = pa.StructArray.from_arrays([data, path], fields=list(field.type), mask=mask)
        elif col.type != field.type:
            col = col.cast(field.type)
        cols.append(col)
    return pa.Table.from_arrays(cols, schema=schema)
