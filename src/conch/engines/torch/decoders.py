"""Decoders for `conch.engines.torch.dataset(decode=...)`: encoded images and WAV audio to tensors.

>>> ds = conch.engines.torch.dataset(t.scan("img", "label"), batch_size=256,
...                          decode={"img": conch.engines.torch.decoders.image(size=(224, 224))})  # doctest: +SKIP

Each decoder is a plain class (picklable, so it travels to DataLoader workers under `fork`,
`spawn` and `forkserver`) called once per value, in the worker that reads the value. A batch of
decoded tensors of one shape is stacked into one tensor (`image(size=...)` gives every image one
shape); values of differing shapes stay a list.

- `image(size=None, mode="RGB")`: PNG, JPEG (and whatever else Pillow opens) to a `uint8` tensor
  `(channels, height, width)`. `size=(h, w)` (or one int for a square) resizes (bilinear); a
  JPEG is first decoded at the smallest power-of-two reduction not below the target (Pillow's
  `draft`), which is most of the decoding saved when images shrink. `mode=None` keeps each
  image's own mode (`L`: one channel; `RGBA`: four).
- `audio(channels_first=True)`: WAV (RIFF) bytes to a `float32` tensor `(channels, frames)`
  in [-1, 1]: PCM of 8 (unsigned), 16, 24 or 32 bits, IEEE float of 32 or 64 bits, plain or
  `WAVE_FORMAT_EXTENSIBLE`. Other encodings raise `conch.DecodeError` naming the format tag.
"""

from __future__ import annotations

import io
import struct
from typing import IO, Any

import numpy as np

from conch.errors import ConchError, DecodeError
from conch.model.deps import optional_import

torch = optional_import("torch")

__all__ = ["DecodeError", "audio", "image"]  # DecodeError: `conch.errors.DecodeError`, also here


class image:
    """Encoded image bytes to a `uint8` CHW tensor (see the module doc)."""

    def __init__(self, size: int | tuple[int, int] | None = None, mode: str | None = "RGB") -> None:
        if isinstance(size, int):
            size = (size, size)
        if size is not None and (len(size) != 2 or min(size) < 1):
            raise ConchError(f"image(size={size!r}): give (height, width) of positive ints, or one int")
        self.size = None if size is None else (int(size[0]), int(size[1]))
        self.mode = mode

    def __repr__(self) -> str:
        return f"conch.engines.torch.decoders.image(size={self.size}, mode={self.mode!r})"

    def __call__(self, value: bytes | memoryview | IO[bytes] | None) -> Any:
        if value is None:
            raise DecodeError("image(): a null value; filter nulls with where= or fill them")
        image_mod = optional_import("PIL.Image")
        try:
            # a file object (`Scan.blob_files`, `open_blob`) is read by Pillow as it needs it
            img = image_mod.open(value if hasattr(value, "read") else io.BytesIO(value))
            if self.size is not None and img.format == "JPEG":
                img.draft(self.mode or img.mode, (self.size[1], self.size[0]))  # DCT-domain reduction
            if self.mode is not None and img.mode != self.mode:
                img = img.convert(self.mode)
            if self.size is not None and img.size != (self.size[1], self.size[0]):
                img = img.resize((self.size[1], self.size[0]), image_mod.Resampling.BILINEAR)
            arr = np.asarray(img)
        except (OSError, ValueError) as e:  # PIL.UnidentifiedImageError is an OSError
            what = f"{len(value)} bytes" if isinstance(value, bytes | memoryview) else repr(value)
            raise DecodeError(f"image(): cannot decode {what} as an image: {e}") from e
        if arr.ndim == 2:
            arr = arr[:, :, None]
        return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


_PCM, _FLOAT, _EXTENSIBLE = 1, 3, 0xFFFE


class audio:
    """WAV bytes to a `float32` tensor in [-1, 1], `(channels, frames)` (see the module doc)."""

    def __init__(self, channels_first: bool = True) -> None:
        self.channels_first = channels_first

    def __repr__(self) -> str:
        return f"conch.engines.torch.decoders.audio(channels_first={self.channels_first})"

    def __call__(self, value: bytes | memoryview | IO[bytes] | None) -> Any:
        if value is None:
            raise DecodeError("audio(): a null value; filter nulls with where= or fill them")
        raw = value.read() if not isinstance(value, bytes | memoryview) else value
        tag, channels, bits, data = _wav_chunks(bytes(raw))
        samples = _samples(tag, bits, data)
        frames = len(samples) // channels
        out = samples[: frames * channels].reshape(frames, channels)
        out = out.T if self.channels_first else out
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))


def _wav_chunks(b: bytes) -> tuple[int, int, int, bytes]:
    """(format tag, channels, bits per sample, data bytes) of a RIFF/WAVE file."""
    if len(b) < 12 or b[:4] != b"RIFF" or b[8:12] != b"WAVE":
        raise DecodeError(f"audio(): {len(b)} bytes are not a RIFF/WAVE file (they start {b[:12]!r})")
    pos, fmt, data = 12, None, None
    while pos + 8 <= len(b):
        cid, size = b[pos : pos + 4], struct.unpack_from("<I", b, pos + 4)[0]
        body = b[pos + 8 : pos + 8 + size]
        if cid == b"fmt ":
            fmt = body
        elif cid == b"data":
            data = body
        pos += 8 + size + (size & 1)  # chunks are padded to even sizes
    if fmt is None or len(fmt) < 16 or data is None:
        raise DecodeError("audio(): the WAV file has no 'fmt ' or no 'data' chunk")
    tag, channels, _rate, _byte_rate, _align, bits = struct.unpack_from("<HHIIHH", fmt)
    if tag == _EXTENSIBLE and len(fmt) >= 26:
        tag = struct.unpack_from("<H", fmt, 24)[0]  # the sub-format GUID starts with the tag
    if channels < 1:
        raise DecodeError("audio(): the WAV file says it has 0 channels")
    return tag, channels, bits, data


def _samples(tag: int, bits: int, data: bytes) -> Any:
    if tag == _PCM and bits == 8:
        return (np.frombuffer(data, np.uint8).astype(np.float32) - 128.0) / 128.0
    if tag == _PCM and bits == 16:
        return np.frombuffer(data, "<i2", len(data) // 2).astype(np.float32) / 32768.0
    if tag == _PCM and bits == 24:
        raw = np.frombuffer(data, np.uint8, len(data) // 3 * 3).reshape(-1, 3).astype(np.int32)
        v = raw[:, 0] | (raw[:, 1] << 8) | (raw[:, 2] << 16)
        v = np.where(v >= 1 << 23, v - (1 << 24), v)
        return v.astype(np.float32) / float(1 << 23)
    if tag == _PCM and bits == 32:
        return (np.frombuffer(data, "<i4", len(data) // 4).astype(np.float64) / float(1 << 31)).astype(np.float32)
    if tag == _FLOAT and bits in (32, 64):
        dt = "<f4" if bits == 32 else "<f8"
        return np.frombuffer(data, dt, len(data) // (bits // 8)).astype(np.float32)
    kind = {_PCM: "PCM", _FLOAT: "IEEE float"}.get(tag, f"format tag {tag:#x}")
    raise DecodeError(f"audio(): {kind} with {bits} bits per sample is not read (PCM 8/16/24/32, float 32/64 are)")
