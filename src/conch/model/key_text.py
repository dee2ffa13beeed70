"""Keys as text, for the command line and the web inspector: `3`, `s1`, `a,2024-01-01T00:00`."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pyarrow as pa

from conch.errors import InvalidArgumentError


def parse_key(text: str, fields: list[pa.Field]) -> tuple[Any, ...]:
    """A key typed as text (a composite key comma-separated) as values of the key's types.

    >>> parse_key("a,2", [pa.field("s", pa.string()), pa.field("n", pa.int64())])
    ('a', 2)
    """
    parts = text.split(",") if len(fields) > 1 else [text]
    if len(parts) != len(fields):
        names = ",".join(f.name for f in fields)
        raise InvalidArgumentError(
            f"key {text!r} has {len(parts)} parts; this level's key is {names} (comma-separated)"
        )
    out: list[Any] = []
    for part, f in zip(parts, fields, strict=True):
        try:
            if pa.types.is_integer(f.type):
                out.append(int(part))
            elif pa.types.is_floating(f.type):
                out.append(float(part))
            elif pa.types.is_timestamp(f.type):
                out.append(datetime.fromisoformat(part))
            elif pa.types.is_binary(f.type):
                out.append(part.encode())
            else:
                out.append(part)
        except ValueError:
            raise InvalidArgumentError(f"key {part!r} is not a {f.type} (key column {f.name!r})") from None
    return tuple(out)


def key_text(key: tuple[Any, ...]) -> str:
    """The text form of a key (the inverse of `parse_key` for ordinary values)."""
    return ",".join(v.decode(errors="replace") if isinstance(v, bytes) else str(v) for v in key)
