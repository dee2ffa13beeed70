"""CSV on Spark under the rules `conch write` reads CSV by (`conch.write.file_input`), so that
`conch ingest --spark` and `conch ingest` make the same table of the same file:

- types are inferred from the first rows by pyarrow, as locally (Spark's own inference reads
  every row and makes a column of numbers text for one `not_a_number`, without a word); a column
  of numbers with a few values that are not is a `SchemaError` naming the column and the value;
- the null markers (`NA`, `N/A`, `null`, an empty field, ...: pyarrow's list) are null in every
  column, text too;
- a value the inferred type cannot hold (further down the file), an empty key field and a line
  with another number of fields stop the job, and the error names the column, the value and,
  for local files, the line.

Spark reads every column as text (`mode=FAILFAST`, so a malformed line is an error, not a row of
nulls); each column is then typed by one Spark expression that raises a marked error
(`raise_error`) on the first value it cannot convert: the checks cost no extra pass over the data.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError, SchemaError
from conch.write.file_input import field_is, line_of, odd_value, odd_value_error

SAMPLE_ROWS = 100_000  # the rows types are inferred from: about what pyarrow's first 16 MB block holds
_MARK = "conch-csv"  # starts the message of every error the typing expressions raise
_BAD_VALUE = re.compile(_MARK + r"\|value\|(?P<name>[^|]*)\|(?P<type>[^|]*)\|(?P<value>.*?)(?: SQLSTATE|\n|$)")
_NO_KEY = re.compile(_MARK + r"\|key\|(?P<name>[^|\s]*)")
_MALFORMED = re.compile(r"Malformed records are detected in record parsing: \[(?P<record>.*?)\]\.")


@dataclass(frozen=True)
class CsvOptions:
    """`--comment` and `--timestamp-format` (strptime; Spark takes one) for `conch ingest --spark`."""

    comment: str | None = None
    timestamp_formats: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.timestamp_formats) > 1:
            raise InvalidArgumentError("--spark reads one --timestamp-format; give one, or ingest without --spark")

    def spark_options(self) -> dict[str, str]:
        out = {} if self.comment is None else {"comment": self.comment}
        if self.timestamp_formats:
            out["timestampFormat"] = spark_pattern(self.timestamp_formats[0])
        return out


# strptime directives → Spark datetime pattern letters (https://spark.apache.org/docs/latest/sql-ref-datetime-pattern.html)
_SPARK_PATTERN = {
    "d": "dd", "m": "MM", "y": "yy", "Y": "yyyy", "b": "MMM", "B": "MMMM", "H": "HH", "I": "hh", "M": "mm",
    "S": "ss", "f": "SSSSSS", "p": "a", "z": "Z", "j": "DDD", "a": "EEE", "A": "EEEE", "%": "%",
}  # fmt: skip


def spark_pattern(fmt: str) -> str:
    """A strptime format as a Spark datetime pattern: `%d-%b-%y` → `dd-MMM-yy` (letters quoted)."""
    out, i = [], 0
    while i < len(fmt):
        c = fmt[i]
        if c == "%":
            d = fmt[i + 1 : i + 2]
            if d not in _SPARK_PATTERN:
                raise InvalidArgumentError(f"timestamp format {fmt!r}: %{d} has no Spark equivalent; write it apart")
            out.append(_SPARK_PATTERN[d])
            i += 2
        else:
            out.append(f"'{c}'" if c.isalpha() else ("''" if c == "'" else c))
            i += 1
    return "".join(out)


def read_csv(spark: Any, paths: Sequence[str], options: CsvOptions, key: Sequence[str] = ()) -> Any:
    """A DataFrame of the CSV files `paths` (a header row each), typed by the rules above."""
    import pyarrow.csv as pacsv

    reader = spark.read.format("csv").option("header", "true").option("inferSchema", "false")
    text = reader.option("mode", "FAILFAST").options(**options.spark_options()).load(list(paths))
    with explained(paths):
        sample = text.limit(SAMPLE_ROWS).toArrow()
    buffer = io.BytesIO()
    pacsv.write_csv(sample, buffer)  # the sample as CSV again (nulls as empty fields), for pyarrow to type
    convert = pacsv.ConvertOptions(
        timestamp_parsers=[*options.timestamp_formats, pacsv.ISO8601], strings_can_be_null=True
    )
    first = pacsv.read_csv(pa.BufferReader(buffer.getvalue()), convert_options=convert)
    odd = odd_value(first.combine_chunks().to_batches()[0], set()) if first.num_rows else None
    if odd is not None:
        name, value, count = odd
        raise odd_value_error(paths[0], _line(paths, text.columns.index(name), value), name, value, count)
    spark_format = options.spark_options().get("timestampFormat")
    return text.select(*[_typed(f.name, f.type, f.name in key, spark_format) for f in first.schema])


def _typed(name: str, arrow_type: pa.DataType, is_key: bool, timestamp_format: str | None) -> Any:
    """Column `name` (text) as `arrow_type`: null markers null, a value that does not convert an error."""
    from pyspark.sql import functions as F

    raw = F.col(f"`{name}`")
    value = F.when(raw.isin(*pacsv_null_values()), F.lit(None)).otherwise(raw)
    if is_key and pa.types.is_date(arrow_type):
        arrow_type = pa.timestamp("us")  # dates cannot be keys (spec/004): midnight, as `conch write` does
    if pa.types.is_null(arrow_type) or pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        typed = value
    elif pa.types.is_timestamp(arrow_type) and timestamp_format:
        typed = F.coalesce(F.try_to_timestamp(value, F.lit(timestamp_format)), value.try_cast("timestamp"))
    else:
        typed = value.try_cast(_SPARK_TYPES.get(str(arrow_type), "string"))
        message = F.concat(F.lit(f"{_MARK}|value|{name}|{arrow_type}|"), value)
        typed = F.when(value.isNotNull() & typed.isNull(), F.raise_error(message)).otherwise(typed)
    if is_key:
        typed = F.when(value.isNull(), F.raise_error(F.lit(f"{_MARK}|key|{name}"))).otherwise(typed)
    return typed.alias(name)


_SPARK_TYPES = {"int64": "bigint", "double": "double", "bool": "boolean", "date32[day]": "date"}


def pacsv_null_values() -> list[str]:
    import pyarrow.csv as pacsv

    return list(pacsv.ConvertOptions().null_values)


@contextmanager
def explained(paths: Sequence[str]) -> Iterator[None]:
    """Turn the marked errors of the typing expressions, and Spark's malformed-record error, into
    a `SchemaError` naming the column, the value and (local files) the line."""
    try:
        yield
    except Exception as e:
        error = _explain(str(e), paths)
        if error is None:
            raise
        raise error from e


def _explain(message: str, paths: Sequence[str]) -> SchemaError | None:
    where = ", ".join(paths)
    if m := _BAD_VALUE.search(message):
        name, value = m["name"], m["value"]
        line = _line(paths, _header(paths).index(name) if name in _header(paths) else -1, value)
        return SchemaError(
            f"cannot read {where}: column {name!r} is {m['type']} (from the first rows), but line {line or '?'} holds "
            f"{value!r}: fix the value, or ingest without --spark and read the column as text with --cast {name}=string"
        )
    if m := _NO_KEY.search(message):
        return SchemaError(
            f"cannot read {where}: a row has no value for key column {m['name']!r} (empty or a null marker such as "
            "NA): every row needs its key"
        )
    if m := _MALFORMED.search(message):
        width = len(_header(paths))
        line = _first_line(
            paths, lambda fields, raw: bool(raw.strip()) and not raw.startswith("#") and len(fields) != width
        )
        return SchemaError(
            f"cannot read {where}: line {line or '?'} has another number of fields than the header's {width} "
            f"(read as [{m['record']}])"
        )
    return None


def _local(paths: Sequence[str]) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        if os.path.isdir(p):
            out += sorted(q for q in Path(p).iterdir() if q.suffix == ".csv" and not q.name.startswith((".", "_")))
        elif os.path.isfile(p):
            out.append(Path(p))
    return out


def _header(paths: Sequence[str]) -> list[str]:
    import csv

    for path in _local(paths):
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            for raw in f:
                if not raw.startswith("#"):
                    return next(csv.reader([raw]), [])
    return []


def _line(paths: Sequence[str], index: int, value: str) -> str | None:
    return _first_line(paths, field_is(index, value)) if index >= 0 else None


def _first_line(paths: Sequence[str], match: Any) -> str | None:
    """`FILE:LINE` of the first line of the local files `paths` that `match`es; None when they
    are not local (the message then has no line)."""
    files = _local(paths)
    for path in files:
        number = line_of(path, match)
        if number is not None:
            return f"{path.name}:{number}" if len(files) > 1 else str(number)
    return None
