"""A folder of media files as rows (`conch ingest-media`): one row per file, keyed by its path
relative to the folder, its bytes given as a stream (`conch.Blob`: copied in parts, never read
whole) and basic metadata read from its header only: size, modification time, MIME type, and
for images `width`/`height` (Pillow, when installed), for WAV audio `sample_rate`, `channels`
and `seconds` (the standard library's `wave`)."""

from __future__ import annotations

import fnmatch
import mimetypes
import os
import wave
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError
from conch.files.blobsource import Blob

KEY = "path"
SCHEMA = pa.schema(
    [
        ("bytes", pa.binary()),
        ("size", pa.int64()),
        ("mtime", pa.timestamp("us", tz="UTC")),
        ("mime", pa.string()),
        ("width", pa.int32()),
        ("height", pa.int32()),
        ("sample_rate", pa.int32()),
        ("channels", pa.int32()),
        ("seconds", pa.float64()),
    ]
)


def media_files(folder: str | os.PathLike[str], patterns: Sequence[str] = ()) -> list[Path]:
    """The files under `folder` (recursively, sorted) whose names match one of `patterns`
    (globs such as `*.jpg`; none: every file)."""
    root = Path(folder)
    if not root.is_dir():
        raise InvalidArgumentError(f"{str(root)!r} is not a folder")
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            if not patterns or any(fnmatch.fnmatch(name.lower(), p.lower()) for p in patterns):
                out.append(Path(dirpath) / name)
    return out


def media_rows(folder: str | os.PathLike[str], files: Sequence[Path]) -> Iterator[dict[str, Any]]:
    """One row per file (module doc)."""
    root = Path(folder)
    for f in files:
        st = f.stat()
        row: dict[str, Any] = {
            KEY: f.relative_to(root).as_posix(),
            "bytes": Blob.from_path(f),
            "size": st.st_size,
            "mtime": datetime.fromtimestamp(st.st_mtime, tz=UTC),
            "mime": mimetypes.guess_type(f.name)[0],
            "width": None,
            "height": None,
            "sample_rate": None,
            "channels": None,
            "seconds": None,
        }
        mime = row["mime"] or ""
        if mime.startswith("image/"):
            row.update(_image_header(f))
        elif mime in ("audio/x-wav", "audio/wav", "audio/vnd.wave"):
            row.update(_wav_header(f))
        yield row


def _image_header(f: Path) -> dict[str, Any]:
    try:
        from PIL import Image

        with Image.open(f) as img:  # reads the header; nothing is decoded
            return {"width": img.width, "height": img.height}
    except Exception:  # no Pillow, or a file it cannot open: metadata stays null
        return {}


def _wav_header(f: Path) -> dict[str, Any]:
    try:
        with wave.open(str(f), "rb") as w:
            rate = w.getframerate()
            return {"sample_rate": rate, "channels": w.getnchannels(), "seconds": w.getnframes() / rate}
    except (wave.Error, EOFError, ZeroDivisionError):
        return {}
