"""Generate the spec/001 audio dataset: keys, metadata, and audio blobs of a few to tens of KB."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

AUDIO_SCHEMA = pa.schema(
    [
        ("id", pa.uint64()),
        ("audio_length", pa.float64()),
        ("silence_ratio", pa.float64()),
        (
            "audio",
            pa.struct(
                [
                    ("bytes", pa.binary()),
                    ("meta", pa.struct([("size", pa.uint64()), ("e_tag", pa.string())])),
                ]
            ),
        ),
    ]
)


def audio_batches(
    rows: int, batch_rows: int = 2_000, seed: int = 0, min_bytes: int = 2_000, max_bytes: int = 30_000
) -> Iterator[pa.RecordBatch]:
    """Record batches of the audio table: 16-bit PCM-like noise whose size tracks its length."""
    rng = np.random.default_rng(seed)
    for start in range(0, rows, batch_rows):
        n = min(batch_rows, rows - start)
        ids = np.arange(start, start + n, dtype=np.uint64)
        length = rng.uniform(1.0, 30.0, n)
        silence = rng.beta(0.6, 3.0, n)
        sizes = (min_bytes + (length - 1.0) / 29.0 * (max_bytes - min_bytes)).astype(np.int64)
        pcm = (rng.normal(0, 3000, int(sizes.sum()) // 2 + 1)).astype(np.int16).tobytes()
        offsets = np.zeros(n + 1, dtype=np.int32)
        np.cumsum(sizes, out=offsets[1:])
        blob = pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offsets), pa.py_buffer(pcm)])
        etag = pa.array([f"{x:016x}" for x in rng.integers(0, 2**63, n)])
        meta = pa.StructArray.from_arrays([pa.array(sizes.astype(np.uint64)), etag], names=["size", "e_tag"])
        audio = pa.StructArray.from_arrays([blob, meta], fields=list(AUDIO_SCHEMA.field("audio").type))
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), pa.array(length), pa.array(silence), audio], schema=AUDIO_SCHEMA
        )
