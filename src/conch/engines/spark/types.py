"""Conch (Arrow) types ↔ Spark SQL types, and the casts between them.

Spark has no unsigned integers and no nanosecond timestamps, so a few Conch types are read
through a wider or coarser Spark type. Every such cast is *checked*: a value that does not fit
(an `uint64` above 2**63 - 1, say) fails the task with a `SchemaError` naming the column,
never wraps or truncates silently.

| Conch / Arrow              | Spark                         |
|----------------------------|-------------------------------|
| bool                       | BOOLEAN                       |
| int8 / int16 / int32 / int64 | TINYINT / SMALLINT / INT / BIGINT |
| uint8 / uint16 / uint32    | SMALLINT / INT / BIGINT       |
| uint64                     | BIGINT (checked)              |
| float16 / float32, float64 | FLOAT, DOUBLE                 |
| decimal128(p, s)           | DECIMAL(p, s)                 |
| utf8, binary               | STRING, BINARY                |
| date32                     | DATE                          |
| timestamp with a time zone | TIMESTAMP (µs, UTC)           |
| timestamp without one      | TIMESTAMP_NTZ (µs)            |
| list / fixed-size list     | ARRAY                         |
| struct (a column group)    | STRUCT                        |
| map                        | MAP                           |

>>> from conch.engines.spark.types import spark_type
>>> spark_type(pa.uint64()).simpleString()  # doctest: +SKIP
'bigint'
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from conch.errors import SchemaError
from conch.model.schema import type_family

_INTS: dict[pa.DataType, Any] = {
    pa.int8(): T.ByteType,
    pa.int16(): T.ShortType,
    pa.int32(): T.IntegerType,
    pa.int64(): T.LongType,
    pa.uint8(): T.ShortType,
    pa.uint16(): T.IntegerType,
    pa.uint32(): T.LongType,
    pa.uint64(): T.LongType,
}


def spark_type(t: pa.DataType, path: str = "") -> T.DataType:
    """The Spark type a Conch column of Arrow type `t` is read as."""
    if t in _INTS:
        return _INTS[t]()
    if pa.types.is_boolean(t):
        return T.BooleanType()
    if pa.types.is_float16(t) or pa.types.is_float32(t):
        return T.FloatType()
    if pa.types.is_float64(t):
        return T.DoubleType()
    if pa.types.is_decimal(t) and t.precision <= 38:
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return T.StringType()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t):
        return T.BinaryType()
    if pa.types.is_date(t):
        return T.DateType()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return T.ArrayType(spark_type(t.value_type, path + "[]"), True)
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type, path + ".key"), spark_type(t.item_type, path + ".value"), True)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type, f"{path}.{f.name}"), True) for f in t])
    raise SchemaError(
        f"column {path!r} has type {t}, which Spark cannot represent; leave it out with the `columns` option"
    )


def spark_schema(schema: pa.Schema) -> T.StructType:
    """A Conch scan's output schema as a Spark schema (key columns are NOT NULL)."""
    return T.StructType([T.StructField(f.name, spark_type(f.type, f.name), f.nullable) for f in schema])


def arrow_schema(schema: T.StructType) -> pa.Schema:
    """The exact Arrow schema Spark requires of a Python data source's record batches."""
    return to_arrow_schema(schema, timezone="UTC")


def cast_batch(batch: pa.RecordBatch, target: pa.Schema) -> pa.RecordBatch:
    """Cast to `target` (same columns, in order), raising `SchemaError` on a value that does not fit."""
    if batch.schema.equals(target):
        return batch
    try:
        return batch.cast(target, safe=True)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError):
        pass
    cols = []
    for f, col in zip(target, batch.columns, strict=True):
        try:
            cols.append(col.cast(f.type, safe=True))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaError(f"column {f.name!r}: cannot convert {col.type} to {f.type} ({e})") from e
    return pa.RecordBatch.from_arrays(cols, schema=target)


# ----- writes: which DataFrame types may be written to which Conch columns ---------------------


def write_type(src: pa.DataType, dst: pa.DataType, path: str) -> pa.DataType:
    """The type a DataFrame column of type `src` is cast to before it is written to a Conch
    column of type `dst`; raises `SchemaError` when no checked cast exists."""
    fs, fd = type_family(src), type_family(dst)
    if fs == "null":
        return dst
    if fs != fd:
        raise SchemaError(
            f"column {path!r} is {dst} in the table; a DataFrame column of type {src} cannot be written to it"
        )
    if fs == "list":
        return pa.list_(write_type(src.value_type, dst.value_type, path + "[]"))
    if fs == "struct":
        names = {f.name for f in dst}
        extra = [f.name for f in src if f.name not in names]
        if extra:
            raise SchemaError(f"column {path!r} has no fields {extra}")
        return pa.struct([f.with_type(write_type(f.type, dst.field(f.name).type, f"{path}.{f.name}")) for f in src])
    return dst
