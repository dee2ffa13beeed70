"""Enrich: compute new columns from existing ones on Spark and write them as a new column group.

Reads only the input columns a function needs (`columns` option: the audio blobs, say), runs it
with `mapInArrow` over Arrow record batches, and writes the key columns plus the new group with
`mergeSchema`. Conch writes only the columns a write includes, so the existing groups' files
are not touched: the enrichment costs the bytes of the new group, not a table rewrite.

>>> enrich(spark, "warehouse", "audio", audio_features, ["audio.bytes", "audio_length"], FEATURES)  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

FEATURES = pa.struct(
    [
        ("rms", pa.float64()),  # loudness: root mean square of the 16-bit samples
        ("peak", pa.int32()),  # largest absolute sample
        ("zero_crossing_rate", pa.float64()),  # sign changes per sample: a cheap noisiness measure
        ("bytes_per_second", pa.float64()),
    ]
)
FEATURES_DDL = "features struct<rms: double, peak: int, zero_crossing_rate: double, bytes_per_second: double>"


@dataclass(frozen=True)
class EnrichResult:
    rows: int
    seq: int
    time: int


def audio_features(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """mapInArrow function: `id`, `audio.bytes`, `audio_length` → `id`, `features` (FEATURES)."""
    for batch in batches:
        audio = batch.column("audio")
        blobs = audio.field("bytes")
        lengths = batch.column("audio_length").to_numpy(zero_copy_only=False)
        n = batch.num_rows
        rms = np.full(n, np.nan)
        peak = np.zeros(n, dtype=np.int32)
        zcr = np.full(n, np.nan)
        for i, b in enumerate(blobs.to_pylist()):
            if not b:
                continue
            pcm = np.frombuffer(b[: len(b) // 2 * 2], dtype=np.int16).astype(np.float64)
            if len(pcm) == 0:
                continue
            rms[i] = float(np.sqrt(np.mean(pcm * pcm)))
            peak[i] = int(np.max(np.abs(pcm)))
            zcr[i] = float(np.count_nonzero(np.diff(np.signbit(pcm)))) / len(pcm)
        sizes = pc.binary_length(blobs).to_numpy(zero_copy_only=False).astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore"):
            bps = np.where(lengths > 0, sizes / lengths, np.nan)
        features = pa.StructArray.from_arrays(
            [pa.array(rms), pa.array(peak), pa.array(zcr), pa.array(bps)], fields=list(FEATURES)
        )
        yield pa.RecordBatch.from_arrays([batch.column("id"), features], names=["id", "features"])


def enrich(
    spark: Any,
    warehouse: str,
    table: str,
    fn: Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    columns: Sequence[str],
    output_ddl: str,
    key: Sequence[str] = ("id",),
    partitions: int | None = None,
) -> EnrichResult:
    """Run `fn` over `columns` of the table and append its output (keys + new columns) in one commit.

    `output_ddl` is the Spark schema of `fn`'s output without the key columns, e.g. FEATURES_DDL.
    """
    import conch
    from conch.spark.writer import committed_rows

    reader = spark.read.format("conch").option("warehouse", warehouse).option("table", table)
    reader = reader.option("columns", ",".join(columns))
    if partitions:
        reader = reader.option("partitions", str(partitions))
    df = reader.load()
    key_ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in df.schema.fields if f.name in key)
    out = df.mapInArrow(fn, f"{key_ddl}, {output_ddl}")
    (
        out.write.format("conch")
        .mode("append")
        .option("warehouse", warehouse)
        .option("table", table)
        .option("mergeSchema", "true")
        .save()
    )
    t = conch.connect(warehouse).table(table)
    last = t.history()[-1]
    rows = sum(committed_rows(t, last.seq).values())
    return EnrichResult(rows=rows, seq=last.seq, time=last.time)
