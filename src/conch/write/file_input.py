"""Files as write input: Parquet, CSV and JSON lines, streamed, with renames and casts (`conch write`).

Every file becomes a stream of record batches of one schema (the first file's, after renames
and casts; later files are cast to it). Column names that cannot be Conch columns (a dot
separates column groups: `Adj. Close*`) are renamed to a suggested snake_case name with a notice;
`--rename 'OLD=NEW'` chooses the name instead (OLD may be a glob). Dates cannot be keys (spec/004
lists integers, floats, timestamps, strings and bytes), so a `date32` key column becomes
`timestamp[us]` (midnight) with a notice; `--cast COL=TYPE` chooses another type.

CSV: lines at the top of a file that start with `#` (a comment block before the header) are
skipped with a notice; `--comment CHAR` skips every line that starts with CHAR, anywhere in the
file (also inside a quoted value that spans lines). Columns are typed by pyarrow's inference, which
reads ISO 8601 times; `--timestamp-format FMT` (strptime, e.g. `%d-%b-%y` for `19-Sep-03`; may be
repeated) adds formats. A text column whose first values all parse with a common date format gets
a notice naming the `--timestamp-format` to pass.

CSV values never change a column's type silently: the null markers (`NA`, `N/A`, `null`, an
empty field, ...) are null in every column, text too (as pandas reads them); a column of numbers
with a few values that are not (`not_a_number`) is a `SchemaError` naming the column, the value
and its line, whether it is in the block pyarrow inferred types from (where it would have made
the column text) or a later one (where the conversion fails); `--cast COL=string` reads such a
column as text. A malformed line (another number of fields) and an empty key field are errors
naming the line.
"""

from __future__ import annotations

import fnmatch
import io
import re
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

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
    comment: str | None = None  # CSV: skip every line starting with this (None: only a leading '#' block)
    timestamp_formats: Sequence[str] = ()  # CSV: strptime formats tried besides ISO 8601


# what a text column of dates is probably written in: checked on a CSV's first batch, for a notice
DATE_FORMATS = (
    "%d-%b-%y", "%d-%b-%Y", "%d %b %Y", "%b %d %Y", "%b %d, %Y", "%m/%d/%Y", "%m/%d/%y", "%d/%m/%Y", "%d.%m.%Y",
    "%Y/%m/%d", "%Y%m%d", "%m/%d/%Y %H:%M", "%m/%d/%Y %H:%M:%S", "%d/%m/%Y %H:%M:%S",
    "%Y/%m/%d %H:%M:%S", "%Y/%m/%d %H:%M",
)  # fmt: skip
NUMBER = r"^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$"
MAX_ODD_VALUES = 10  # a column of numbers with at most this many other values is refused, not made text


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


def _raw_batches(path: Path, fmt: str, spec: FileInput) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(path)
        return pf.schema_arrow, pf.iter_batches(batch_size=65_536)
    if fmt == "csv":
        return _csv_batches(path, spec)
    import pyarrow.json as pajson

    with open(path, "rb") as f:
        if f.read(4096).lstrip().startswith(b"["):
            raise SchemaError(
                f"{path} is one JSON array; JSON input is JSON lines (one object per line): convert it with "
                f"`jq -c '.[]' {path.name} > {path.stem}.jsonl`, or read it into a list of dicts and call Table.write"
            )
    table = pajson.read_json(path)
    return table.schema, iter(table.to_batches())


def read_files(spec: FileInput, on_schema: Callable[[pa.Schema], None] | None = None) -> pa.RecordBatchReader:
    """One stream over every file of `spec`, in the first file's (conformed) schema."""
    first_raw, first_batches = _read(spec.paths[0], spec)
    try:
        target = conform(spec, first_raw)
        if on_schema is not None:
            on_schema(target)
    except BaseException:
        if hasattr(first_batches, "close"):
            first_batches.close()  # a CSV's reader and file, now (see `_csv_batches`)
        raise

    def batches() -> Iterator[pa.RecordBatch]:
        yield from _cast_all(first_batches, target, spec.paths[0], spec.key)
        for p in spec.paths[1:]:
            raw, bs = _read(p, spec)
            if len(raw) != len(target):
                raise SchemaError(
                    f"{p} has columns {raw.names}, but {spec.paths[0]} has {len(target)}: ingest them apart"
                )
            yield from _cast_all(bs, target, p, spec.key)

    return pa.RecordBatchReader.from_batches(target, batches())


def _read(path: Path, spec: FileInput) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    try:
        return _raw_batches(path, format_of(path, spec.format), spec)
    except pa.ArrowInvalid as e:
        raise SchemaError(f"cannot read {path}: {_csv_hint(str(e).splitlines()[0])}") from e


def _csv_hint(message: str) -> str:
    """A CSV parse error, with the fix when the row it names looks like a comment line."""
    m = re.search(r"Expected \d+ columns, got \d+: (\S)", message)
    if m and not m.group(1).isalnum() and m.group(1) not in "\"'-+.":
        return f"{message} (a comment line? skip lines starting with {m.group(1)!r}: --comment '{m.group(1)}')"
    return message


def _csv_batches(path: Path, spec: FileInput) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    import pyarrow.csv as pacsv

    leading = _leading_comment_lines(path, spec.comment or "#")
    if spec.comment is None and leading:
        spec.notices.append(
            f"skipped {leading} comment line(s) starting with '#' at the top of {path.name}; "
            f"lines starting with '#' further down need --comment '#'"
        )
    filtered = spec.comment is not None or leading > 0
    # A file with no comment lines is read natively (by path); otherwise through the line filter,
    # a Python stream, which pyarrow must stop reading before the interpreter exits: the batches
    # close the reader and the file when exhausted, failed or closed (`read_files` closes them
    # on a schema error).
    raw: Any = open(path, "rb") if filtered else None  # noqa: SIM115 (closed by the batches)
    source: Any = (
        _SkipLines(raw, (spec.comment or "#").encode(), everywhere=spec.comment is not None) if filtered else str(path)
    )
    text = {n: t for n, t in spec.cast.items() if pa.types.is_string(t) or pa.types.is_large_string(t)}
    convert = pacsv.ConvertOptions(
        timestamp_parsers=[*spec.timestamp_formats, pacsv.ISO8601], strings_can_be_null=True, column_types=text
    )
    options = pacsv.ReadOptions(block_size=16 << 20, use_threads=not filtered)
    try:
        reader = pacsv.open_csv(source, read_options=options, convert_options=convert)
    except pa.ArrowInvalid as e:
        if raw is not None:
            raw.close()
        raise SchemaError(f"cannot read {path}: {_csv_error(path, str(e))}") from e
    except BaseException:
        if raw is not None:
            raw.close()
        raise

    def batches() -> Generator[pa.RecordBatch, None, None]:
        try:
            try:
                first = reader.read_next_batch()
            except StopIteration:
                return
            except pa.ArrowInvalid as e:
                raise SchemaError(f"cannot read {path}: {_csv_error(path, str(e))}") from e
            _note_dates(first, path, spec)
            _refuse_odd_values(first, path, set(text))
            yield first
            try:
                yield from reader
            except pa.ArrowInvalid as e:  # a later block: say which file, line and column, and the fix
                raise SchemaError(f"cannot read {path}: {_csv_error(path, str(e), reader.schema)}") from e
        finally:
            reader.close()
            if raw is not None:
                raw.close()

    return reader.schema, _peeked(batches())


def _csv_error(path: Path, message: str, schema: pa.Schema | None = None) -> str:
    """pyarrow's CSV error with the line it is about and the fix."""
    message = message.splitlines()[0]
    bad = re.search(r"Expected \d+ columns, got \d+: (.*)$", message)
    if bad:  # a line with another number of fields: pyarrow quotes it
        line = line_of(path, lambda _, raw: raw.rstrip("\r\n") == bad.group(1))
        return f"line {line}: {_csv_hint(message)}" if line else _csv_hint(message)
    m = re.match(r"In CSV column #(\d+): CSV conversion error to (\S+): invalid value '(.*)'$", message)
    if m and schema is not None:
        index, typ, value = int(m.group(1)), m.group(2), m.group(3)
        name = schema.names[index]
        line = line_of(path, field_is(index, value))
        return (
            f"column {name!r} is {typ} (from the file's first rows), but line {line or '?'} holds {value!r}: fix the "
            f"value, or read the column as text with --cast {name}=string"
        )
    return _csv_hint(message)


def line_of(path: Path, match: Callable[[list[str], str], bool]) -> int | None:
    """The number of the first line of CSV `path` (1: the first line) whose row matches (an
    error path: the file is read again, by Python's csv module)."""
    import csv

    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, start=1):
            fields = next(csv.reader([raw]), [])
            if match(fields, raw):
                return number
    return None


def field_is(index: int, value: str) -> Callable[[list[str], str], bool]:
    return lambda fields, _: len(fields) > index and fields[index] == value


def odd_value(batch: pa.RecordBatch, text: set[str]) -> tuple[str, str, int] | None:
    """The first text column (as inferred) of `batch` whose values are numbers but for a few:
    `(column, the first value that is not a number, how many are not)`, else None. One
    `not_a_number` must not turn a column of numbers into text without a word (the rule
    `conch write` and `conch ingest --spark` share)."""
    import pyarrow.compute as pc

    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if name in text or not pa.types.is_string(col.type):
            continue
        values = col.drop_null()
        numeric = pc.match_substring_regex(values, NUMBER)
        odd = len(values) - pc.sum(numeric).as_py() if len(values) else 0
        if 0 < odd <= MAX_ODD_VALUES and odd * 10 <= len(values):
            return name, values.filter(pc.invert(numeric))[0].as_py(), odd
    return None


def odd_value_error(path: str | Path, line: int | str | None, name: str, value: str, odd: int) -> SchemaError:
    return SchemaError(
        f"cannot read {path}: column {name!r} holds numbers, but line {line or '?'} holds {value!r} "
        f"({odd} value(s) are not numbers): fix the value, or read the column as text with --cast {name}=string"
    )


def _refuse_odd_values(batch: pa.RecordBatch, path: Path, text: set[str]) -> None:
    odd = odd_value(batch, text)
    if odd is not None:
        name, value, count = odd
        line = line_of(path, field_is(batch.schema.get_field_index(name), value))
        raise odd_value_error(path, line, name, value, count)


def _peeked(it: Generator[pa.RecordBatch, None, None]) -> Iterator[pa.RecordBatch]:
    """`it`, whose first batch is read now (so that its notices are known before writing starts);
    closing the result closes `it`."""
    try:
        first = next(it)
    except StopIteration:
        return iter(())

    def rest() -> Iterator[pa.RecordBatch]:
        try:
            yield first
            yield from it
        finally:
            it.close()

    return rest()


def _leading_comment_lines(path: Path, char: str) -> int:
    """How many lines at the top of `path` start with `char` (a comment block before the header)."""
    n = 0
    with open(path, "rb") as f:
        for line in f:
            if not line.startswith(char.encode()):
                break
            n += 1
    return n


class _SkipLines(io.RawIOBase):
    """A byte stream of `raw` without the lines that start with `prefix`: every such line
    (`everywhere`), or only those before the first other line. Streams: holds one partial line."""

    def __init__(self, raw: Any, prefix: bytes, everywhere: bool, chunk: int = 1 << 20) -> None:
        self._raw, self._prefix, self._everywhere, self._chunk = raw, prefix, everywhere, chunk
        self._pending = b""  # filtered bytes not yet returned
        self._partial = b""  # the start of a line whose end is not read yet
        self._leading = True

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            chunk = self._raw.read(self._chunk)
            if not chunk:
                self._pending, self._partial = self._keep(self._partial), b""
                if not self._pending:
                    return 0
                break
            if not self._everywhere and not self._leading:  # past the leading block: pass through
                self._pending, self._partial = self._partial + chunk, b""
                break
            *lines, self._partial = (self._partial + chunk).split(b"\n")
            self._pending = b"".join(self._keep(line + b"\n") for line in lines)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n

    def _keep(self, line: bytes) -> bytes:
        if (self._everywhere or self._leading) and line.startswith(self._prefix):
            return b""
        if line:
            self._leading = False
        return line


def _note_dates(batch: pa.RecordBatch, path: Path, spec: FileInput) -> None:
    """A notice for each text column of `batch` whose first values are all dates in one common format."""
    import pyarrow.compute as pc

    for name, col in zip(batch.schema.names, batch.columns, strict=True):
        if not pa.types.is_string(col.type) and not pa.types.is_large_string(col.type):
            continue
        sample = col.slice(0, 100).drop_null()
        if len(sample) == 0:
            continue
        for fmt in DATE_FORMATS:
            try:
                pc.strptime(sample, format=fmt, unit="s")
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            spec.notices.append(
                f"column {name!r} of {path.name} looks like dates ({sample[0].as_py()!r}) but is read as text; "
                f"to read it as timestamps pass --timestamp-format '{fmt}'"
            )
            break


def _cast_all(
    batches: Iterator[pa.RecordBatch], target: pa.Schema, path: Path, key: Sequence[str] = ()
) -> Iterator[pa.RecordBatch]:
    rows = 0
    try:
        for b in batches:
            for name in key:
                col = b.column(target.get_field_index(name))
                if col.null_count and not pa.types.is_null(col.type):
                    row = rows + col.is_null().to_numpy(zero_copy_only=False).argmax() + 1
                    raise SchemaError(
                        f"{path}: row {row} (after the header) has no value for key column {name!r} (empty or a "
                        "null marker such as NA): every row needs its key"
                    )
            rows += b.num_rows
            arrays = []
            for col, f in zip(b.columns, target, strict=True):
                arrays.append(col if col.type == f.type else col.cast(f.type))
            yield pa.RecordBatch.from_arrays(arrays, schema=target)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        raise SchemaError(f"cannot read {path}: {str(e).splitlines()[0]}; use --cast COL=TYPE") from e
