"""What a value is, at a glance: blobs by their magic bytes (PNG, JPEG, WAV, ...), tensors by shape.

Used by `conch scan`/`conch get` (one-line descriptions instead of `<19834 bytes>`) and by the
web inspector (thumbnails, audio players, waveforms, heat maps). Reads only headers: a preview of
a 100 MB blob costs a few bytes of parsing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from conch.model.progress import human_bytes


@dataclass(frozen=True, slots=True)
class BlobInfo:
    """What a blob holds: `kind` is image | audio | binary; `mime` for the browser."""

    kind: str
    format: str
    mime: str
    size: int
    width: int | None = None
    height: int | None = None
    seconds: float | None = None
    rate: int | None = None
    channels: int | None = None

    def describe(self) -> str:
        """`PNG 64×48, 1.2KB`, `WAV 1.50s 16000Hz mono, 48.0KB`, `binary 19.8KB`."""
        size = human_bytes(self.size)
        if self.kind == "image" and self.width is not None:
            return f"{self.format} {self.width}×{self.height}, {size}"
        if self.kind == "audio" and self.seconds is not None:
            chans = {1: "mono", 2: "stereo"}.get(self.channels or 0, f"{self.channels}ch")
            return f"{self.format} {self.seconds:.2f}s {self.rate}Hz {chans}, {size}"
        if self.kind != "binary":
            return f"{self.format}, {size}"
        return f"binary {size}"


def sniff(blob: bytes) -> BlobInfo:
    """Identify a blob by its first bytes; headers that do not parse fall back to `binary`."""
    n = len(blob)
    try:
        if blob.startswith(b"\x89PNG\r\n\x1a\n") and n >= 24:
            w, h = struct.unpack(">II", blob[16:24])
            return BlobInfo("image", "PNG", "image/png", n, w, h)
        if blob.startswith(b"\xff\xd8\xff"):
            w, h = _jpeg_size(blob)
            return BlobInfo("image", "JPEG", "image/jpeg", n, w, h)
        if blob[:6] in (b"GIF87a", b"GIF89a") and n >= 10:
            w, h = struct.unpack("<HH", blob[6:10])
            return BlobInfo("image", "GIF", "image/gif", n, w, h)
        if blob[:4] in (b"II*\x00", b"MM\x00*"):  # the browser cannot show it: the inspector converts it
            return BlobInfo("image", "TIFF", "image/tiff", n)
        if blob.startswith(b"RIFF") and blob[8:12] == b"WEBP":
            return BlobInfo("image", "WebP", "image/webp", n)
        if (
            blob.startswith(b"BM")
            and n >= 26
            and blob[14:18] in (b"\x28\x00\x00\x00", b"\x6c\x00\x00\x00", b"\x7c\x00\x00\x00")
        ):
            w, h = struct.unpack("<ii", blob[18:26])
            return BlobInfo("image", "BMP", "image/bmp", n, w, abs(h))
        if blob.startswith(b"RIFF") and blob[8:12] == b"WAVE":
            wav = parse_wav(blob)
            if wav is not None:
                rate, channels, bits, data_bytes = wav[0], wav[1], wav[2], len(wav[3])
                seconds = data_bytes / max(1, rate * channels * bits // 8)
                return BlobInfo("audio", "WAV", "audio/wav", n, seconds=seconds, rate=rate, channels=channels)
        if blob.startswith(b"fLaC"):
            return BlobInfo("audio", "FLAC", "audio/flac", n)
        if blob.startswith(b"OggS"):
            return BlobInfo("audio", "Ogg", "audio/ogg", n)
        if blob.startswith(b"ID3") or blob[:2] in (b"\xff\xfb", b"\xff\xf3"):
            return BlobInfo("audio", "MP3", "audio/mpeg", n)
    except (struct.error, ValueError, IndexError):
        pass
    return BlobInfo("binary", "binary", "application/octet-stream", n)


def _jpeg_size(blob: bytes) -> tuple[int | None, int | None]:
    i = 2
    while i + 9 < len(blob):
        if blob[i] != 0xFF:
            return None, None
        marker = blob[i + 1]
        seg = struct.unpack(">H", blob[i + 2 : i + 4])[0]
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            h, w = struct.unpack(">HH", blob[i + 5 : i + 9])
            return w, h
        i += 2 + seg
    return None, None


def parse_wav(blob: bytes) -> tuple[int, int, int, bytes] | None:
    """`(rate, channels, bits, pcm bytes)` of a PCM or float WAV file, or None."""
    wav = _wav(blob)
    return None if wav is None else wav[1:]


def _wav(blob: bytes) -> tuple[int, int, int, int, bytes] | None:
    """`(format, rate, channels, bits, sample bytes)`: format 1 (integer PCM) or 3 (IEEE float),
    also when written as WAVE_FORMAT_EXTENSIBLE (its sub-format names which)."""
    i, fmt, data, sub = 12, None, None, None
    while i + 8 <= len(blob):
        cid, size = blob[i : i + 4], struct.unpack("<I", blob[i + 4 : i + 8])[0]
        body = blob[i + 8 : i + 8 + size]
        if cid == b"fmt " and len(body) >= 16:
            fmt = struct.unpack("<HHIIHH", body[:16])
            sub = struct.unpack("<H", body[24:26])[0] if len(body) >= 26 else None
        elif cid == b"data":
            data = body
        i += 8 + size + (size & 1)
    if fmt is None or data is None:
        return None
    tag = sub if fmt[0] == 0xFFFE else fmt[0]
    if tag not in (1, 3):
        return None
    return tag, fmt[2], fmt[1], fmt[5], data


def wav_samples(blob: bytes) -> np.ndarray | None:
    """The samples of a WAV blob as float64 in [-1, 1], one row per frame and one column per
    channel: integer PCM of 8 (unsigned), 16, 24 or 32 bits, or 32/64-bit float. None for other
    blobs and other encodings."""
    wav = _wav(blob)
    if wav is None:
        return None
    tag, _rate, channels, bits, pcm = wav
    if channels < 1 or bits % 8:
        return None
    width = bits // 8
    usable = len(pcm) - len(pcm) % (width * channels)
    raw = pcm[:usable]
    if tag == 3:
        if bits not in (32, 64):
            return None
        samples = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float64)
        samples = np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0)
    elif bits == 8:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float64) - 128.0) / 128.0
    elif bits in (16, 32):
        samples = np.frombuffer(raw, dtype="<i2" if bits == 16 else "<i4").astype(np.float64) / 2.0 ** (bits - 1)
    elif bits == 24:  # three little-endian bytes: widen to int32 with the sign in the top byte
        b = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = (b[:, 0] | (b[:, 1] << 8) | (b[:, 2] << 16)) << 8 >> 8
        samples = ints.astype(np.float64) / 2.0**23
    else:
        return None
    return samples.reshape(-1, channels)


def waveform(blob: bytes, points: int = 200) -> np.ndarray | None:
    """Peak amplitudes in [0, 1] of a WAV blob in `points` buckets (None: not a WAV that
    `wav_samples` reads)."""
    frames = wav_samples(blob)
    if frames is None:
        return None
    mono = np.minimum(np.abs(frames).max(axis=1), 1.0) if frames.size else np.zeros(1)
    buckets = np.array_split(mono, min(points, max(1, mono.size)))
    return np.array([float(b.max()) if b.size else 0.0 for b in buckets])


def tensor_shape(value: Any) -> tuple[int, ...] | None:
    """The shape of a nested list of numbers (`[[1, 2], [3, 4]]` → `(2, 2)`), or None."""
    shape: list[int] = []
    cur = value
    while isinstance(cur, list):
        if not cur:
            shape.append(0)
            return tuple(shape)
        shape.append(len(cur))
        cur = cur[0]
    if not shape or not isinstance(cur, int | float) or isinstance(cur, bool):
        return None
    try:
        arr = np.asarray(value, dtype=np.float64)
    except ValueError:
        return None  # ragged
    return tuple(arr.shape) if arr.ndim == len(shape) else None


def describe(value: Any, text_width: int = 60) -> str:
    """A one-line description of any cell value for a terminal."""
    if isinstance(value, bytes):
        return sniff(value).describe()
    if isinstance(value, list):
        shape = tensor_shape(value)
        if shape is not None and (len(shape) > 1 or shape[0] > 8):
            return f"tensor {'×'.join(map(str, shape))}"
        if len(value) > 8:
            return f"[{len(value)} items]"
    if isinstance(value, str) and len(value) > text_width:
        return value[: text_width - 1] + "…"
    return str(value)
