"""A small multimodal table for the inspector's tests: images, audio, tensors, text, history."""

from __future__ import annotations

import io
import struct
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


def photo(seed: int, size: tuple[int, int] = (256, 192)) -> bytes:
    """A photo-like PNG (smooth shapes and sensor noise: compresses as photos do, ~100 KB)."""
    w, h = size
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    base = np.stack(
        [
            128 + 100 * np.sin(x / (40 + seed) + seed),
            128 + 100 * np.cos(y / (30 + 2 * seed)),
            128 + 90 * np.sin((x + y) / (55 + seed)),
        ],
        axis=-1,
    )
    img = np.clip(base + rng.normal(0, 6, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    return buf.getvalue()


def wav_pcm(
    freq: float,
    bits: int,
    seconds: float = 0.25,
    rate: int = 16000,
    channels: int = 1,
    peak: float = 0.8,
    extensible: bool = False,
) -> bytes:
    """A sine WAV of amplitude `peak` as `bits`-bit integer PCM (8, 16, 24, 32) or float (-32,
    -64), byte by byte; `extensible`: with a WAVE_FORMAT_EXTENSIBLE header (sub-format GUID)."""
    t = np.arange(int(seconds * rate)) / rate
    x = peak * np.sin(2 * np.pi * freq * t)
    frames = np.repeat(x[:, None], channels, axis=1).reshape(-1)
    if bits < 0:
        data = frames.astype("<f4" if bits == -32 else "<f8").tobytes()
        width, tag = -bits // 8, 3
    elif bits == 8:
        data, width, tag = np.clip(np.round(frames * 128 + 128), 0, 255).astype(np.uint8).tobytes(), 1, 1
    else:
        ints = np.round(frames * (2 ** (bits - 1) - 1)).astype(np.int64)
        width, tag = bits // 8, 1
        data = b"".join(int(v).to_bytes(width, "little", signed=True) for v in ints)
    head = (0xFFFE if extensible else tag, channels, rate, rate * channels * width, channels * width, width * 8)
    fmt = struct.pack("<HHIIHH", *head)
    if extensible:  # cbSize, valid bits, channel mask, sub-format GUID (its first two bytes: the format)
        fmt += struct.pack("<HHI", 22, width * 8, 0) + struct.pack("<H", tag) + bytes(14)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


FEATURES = [
    f"f{i:02d}_{n}"
    for i, n in enumerate(
        ["loud", "noisy", "pitch", "tempo", "bright", "rough", "sharp", "flat", "warm", "dark", "wide", "deep", "fast"]
    )
]


def make_first_hour(catalog: conch.Catalog, rows: int = 13) -> conch.Table:
    """Table `scans` as a new user makes it: photos, 24-bit audio, a 13-field struct group, long
    paths; five commits, of which the first three are then expired."""
    t = catalog.create_table("scans", [("path", pa.string())])
    paths = [
        f"/data/incoming/2026/site-{i % 3}/camera-{i:02d}/scan-{i:04d}-with-a-long-file-name.png" for i in range(rows)
    ]
    t.write([{"path": p, "site": i % 3} for i, p in enumerate(paths)])
    t.write([{"path": p, "image": {"png": photo(i)}} for i, p in enumerate(paths)])
    t.write([{"path": p, "audio": {"wav": wav_pcm(220.0 * (i + 1), 24)}} for i, p in enumerate(paths)])
    t.write(
        [
            {"path": p, "features": {f: (i + 1) * (j + 1) / 7 for j, f in enumerate(FEATURES)}}
            for i, p in enumerate(paths)
        ]
    )
    t.write([{"path": paths[0], "site": 9}])
    t.expire(retain_last=2)
    return t
