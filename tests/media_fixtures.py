"""A small multimodal table for the inspector's tests: images, audio, tensors, text, history."""

from __future__ import annotations

import io
import wave

import numpy as np
import pyarrow as pa
from PIL import Image

import conch


def png(seed: int, size: tuple[int, int] = (48, 32)) -> bytes:
    """A colourful gradient PNG, different per seed."""
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    rgb = np.stack([(x * 5 + seed * 40) % 256, (y * 7 + seed * 90) % 256, ((x + y) * 3 + seed * 20) % 256], axis=-1)
    buf = io.BytesIO()
    Image.fromarray(rgb.astype(np.uint8)).save(buf, format="PNG")
    return buf.getvalue()


def wav(freq: float, seconds: float = 0.5, rate: int = 8000) -> bytes:
    """A mono 16-bit PCM WAV of a decaying sine."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (np.sin(2 * np.pi * freq * t) * np.exp(-3 * t) * 30000).astype("<i2")
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.tobytes())
    return buf.getvalue()


def make_media(catalog: conch.Catalog, rows: int = 6) -> conch.Table:
    """Table `media` (key id): metadata, then images + captions, then audio and embeddings, then a delete."""
    t = catalog.create_table("media", [("id", pa.uint64())])
    t.write([{"id": i, "score": i / 10, "label": f"item-{i}"} for i in range(rows)])
    long_text = "A long caption that keeps going. " * 12
    t.write([{"id": i, "image": {"png": png(i), "caption": f"#{i}: {long_text}"}} for i in range(rows)])
    grid = np.add.outer(np.arange(16), np.arange(16)).astype(float)
    t.write(
        [
            {"id": i, "audio": {"wav": wav(220.0 * (i + 1))}, "embedding": (np.sin(grid / (i + 2))).tolist()}
            for i in range(rows)
        ]
    )
    t.delete([rows - 1])
    return t
