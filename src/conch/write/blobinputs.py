"""Values given as streams in write input: `conch.Blob`s, `pathlib.Path`s and binary file
objects in rows (lists of dicts, dicts of lists, one dict, at any depth of nested structs and
child levels) become tokens before the input is made Arrow (`conch.files.blobsource`), so a
large value is copied into its blob file in parts when the fragment is written, never read
whole into memory. Arrow, pandas and Polars input cannot hold such objects and is passed on as is.
"""

from __future__ import annotations

from typing import Any

from conch.files.blobsource import Sources, as_blob


def swap_sources(data: Any) -> tuple[Any, Sources]:
    """`data` with every streamed value replaced by its token (copies of the containers that
    hold one; `data` itself is not changed), and the write's `Sources`."""
    sources = Sources()
    if isinstance(data, list):
        out: Any = [_swap(row, sources) for row in data]
    elif isinstance(data, dict):
        out = _swap(data, sources)
    else:
        return data, sources
    return (out, sources) if sources.blobs else (data, sources)


def _swap(value: Any, sources: Sources) -> Any:
    if isinstance(value, dict):
        return {k: _swap(v, sources) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_swap(v, sources) for v in value]
    blob = as_blob(value)
    return sources.token(blob) if blob is not None else value
