"""The demo's audio features, an enrichment fn (`Table.enrich`; its Spark engine is
`conch.engines.spark.enrich`).

>>> t.enrich(audio_features, inputs=["audio.bytes", "audio_length"], into="features", engine="spark", spark=spark)  # doctest: +SKIP
"""

from __future__ import annotations

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


def audio_features(batch: pa.RecordBatch) -> pa.RecordBatch:
    """Enrichment fn: `audio.bytes`, `audio_length` → the FEATURES fields, one row per input row."""
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
    return pa.RecordBatch.from_arrays(
        [pa.array(rms), pa.array(peak), pa.array(zcr), pa.array(bps)], schema=pa.schema(list(FEATURES))
    )
