"""Files as write input: Parquet, CSV and JSON lines, streamed, with renames and casts (`conch write`).

Every file becomes a stream of record batches of one schema (the first file's, after renames
and casts; later files are cast to it). Column names that cannot be Conch columns (a dot
separates column groups: `Adj. Close*`) are renamed to a suggested snake_case name with a notice;
`--rename 'OLD=NEW'` chooses the name instead (OLD may be a glob). Dates cannot be keys (spec/004
lists integers, floats, timestamps, strings and bytes), so a `date32` key column becomes
`timestamp[us]` (midnight) with a notice; `--cast COL=TYPE` chooses another type.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa

from conch.errors import InvalidArgumentError, SchemaError

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".json": "json", ".jsonl": "json", ".ndjson": "json", ".csv": "csv"}


@dataclass
class FileInput:
    """The plan for reading files: renames and casts, and the notices to show the user."""

    paths: list[Path]
    format: str | None = None
    rename: dict[str, str] = field(default_factory=dict)
    cast: dict[str, pa.DataType] = field(default_factory=dict)
    key: Sequence[str] = ()
    notices: list[str] = field(default_factory=list)


def expand(sources: Sequence[str]) -> list[Path]:
    """Files named, and the data files inside directories named (sorted)."""
    out: list[Path] = []
    for s in sources:
        p = Path(s)
        if p.is_dir():
            out.extend(sorted(f for f in p.iterdir() if f.suffix in FORMATS and not f.name.startswith((".", "_"))))
        elif p.exists():
            out.append(p)
        else:
            raise InvalidArgumentError(f"no such file: {s}")
    if not out:
        raise InvalidArgumentError(f"no data files (.parquet, .csv, .json, .jsonl) in {list(sources)}")
    return out


def format_of(path: Path, fmt: str | None) -> str:
    if fmt is not None:
        if fmt not in ("parquet", "csv", "json"):
            raise InvalidArgumentError(f"unknown format {fmt!r}: use --format parquet, csv or json")
        return fmt
    found = FORMATS.get(path.suffix.lower())
    if found is None:
        raise InvalidArgumentError(
            f"cannot tell the format of {str(path)!r} by its extension: pass --format parquet|csv|json"
        )
    return found


def parse_type(text: str) -> pa.DataType:
    """An Arrow type from its name: `int64`, `float32`, `string`, `timestamp[us]`, `timestamp[ms, tz=UTC]`."""
    t = text.strip()
    m = re.fullmatch(r"timestamp\[(s|ms|us|ns)(?:,\s*tz=([^\]]+))?\]", t)
    if m:
        return pa.timestamp(m.group(1), tz=m.group(2))
    aliases = {"utf8": "string", "str": "string", "bytes": "binary", "float": "float64", "int": "int64"}
    try:
        return pa.type_for_alias(aliases.get(t, t))
    except (ValueError, KeyError):
        raise InvalidArgumentError(
            f"unknown type {text!r}: use an Arrow type name such as int64, uint64, float64, string, binary, "
            "bool, date32 or timestamp[us]"
        ) from None


def parse_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """`["A=b", "C=d"]` → `{"A": "b", "C": "d"}` (split at the last `=`)."""
    out = {}
    for item in items:
        old, sep, new = item.rpartition("=")
        if not sep or not old or not new:
            raise InvalidArgumentError(f"{what} takes OLD=NEW, got {item!r}")
        out[old] = new
    return out


def suggest_name(name: str) -> str:
    """A valid snake_case column name for `name` (`"Adj. Close*"` → `"adj_close"`)."""
    s = re.sub(r"[^0-9a-zA-Z]+", "_", name).strip("_").lower()
    return s or "column"


def valid_name(name: str) -> bool:
    return bool(name) and "." not in name and not name.startswith("__")


def _target_names(spec: FileInput, names: list[str]) -> list[str]:
    out = []
    for n in names:
        new = spec.rename.get(n)
        if new is None:
            new = next((v for k, v in spec.rename.items() if fnmatch.fnmatchcase(n, k)), None)
        if new is None and not valid_name(n):
            new = suggest_name(n)
            spec.notices.append(
                f"renamed column {n!r} to {new!r} (a dot separates column groups); choose: --rename '{n}={new}'"
            )
        out.append(new if new is not None else n)
    for old in spec.rename:
        if old not in names and not any(fnmatch.fnmatchcase(n, old) for n in names):
            raise InvalidArgumentError(f"--rename {old!r} matches no column; columns are {names}")
    bad = [n for n in out if not valid_name(n)]
    if bad:
        raise SchemaError(
            f"column name {bad[0]!r} is not valid (no dots, no leading '__'): choose another with --rename"
        )
    dup = sorted({n for n in out if out.count(n) > 1})
    if dup:
        raise SchemaError(f"two columns would be named {dup[0]!r}: give them distinct names with --rename")
    return out


def conform(spec: FileInput, schema: pa.Schema) -> pa.Schema:
    """The schema written for an input schema: renamed, cast, date keys made timestamps."""
    names = _target_names(spec, schema.names)
    for c in spec.cast:
        if c not in names:
            raise InvalidArgumentError(f"--cast {c!r} names no column; columns are {names}")
    fields = []
    for f, name in zip(schema, names, strict=True):
        t = spec.cast.get(name, f.type)
        if name in spec.key and name not in spec.cast and pa.types.is_date(t):
            t = pa.timestamp("us")
            spec.notices.append(
                f"key column {name!r} is a date; keys are timestamps, so it is stored as timestamp[us] "
                f"(midnight); choose: --cast {name}=TYPE"
            )
        fields.append(pa.field(name, t))
    return pa.schema(fields)


def _raw_batches(path: Path, fmt: str) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        return pf.schema_arrow, pf.iter_batches(batch_size=65_536)
    if fmt == "csv":
        import pyarrow.csv as pacsv

        reader = pacsv.open_csv(path, read_options=pacsv.ReadOptions(block_size=16 << 20))
        return reader.schema, iter(reader)
    import pyarrow.json as pajson

    table = pajson.read_json(path)
    return table.schema, iter(table.to_batches())


def read_files(spec: FileInput, on_schema: Callable[[pa.Schema], None] | None = None) -> pa.RecordBatchReader:
    """One stream over every file of `spec`, in the first file's (conformed) schema."""
    first_raw, first_batches = _read(spec.paths[0], spec.format)
    target = conform(spec, first_raw)
    if on_schema is not None:
        on_schema(target)

    def batches() -> Iterator[pa.RecordBatch]:
        yield from _cast_all(first_batches, target, spec.paths[0])
        for p in spec.paths[1:]:
            raw, bs = _read(p, spec.format)
            if len(raw) != len(target):
                raise SchemaError(
                    f"{p} has columns {raw.names}, but {spec.paths[0]} has {len(target)}: ingest them apart"
                )
            yield from _cast_all(bs, target, p)

    return pa.RecordBatchReader.from_batches(target, batches())


def _read(path: Path, fmt: str | None) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    try:
        return _raw_batches(path, format_of(path, fmt))
    except pa.ArrowInvalid as e:
        raise SchemaError(f"cannot read {path}: {str(e).splitlines()[0]}") from e


def _cast_all(batches: Iterator[pa.RecordBatch], target: pa.Schema, path: Path) -> Iterator[pa.RecordBatch]:
    try:
        for b in batches:
            arrays = []
            for col, f in zip(b.columns, target, strict=True):
                arrays.append(col if col.type == f.type else col.cast(f.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"cannot read {path}: {str(e).splitlines()[0]}; use --cast COL=TYPE") from e
