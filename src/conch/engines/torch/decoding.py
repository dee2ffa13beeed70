"""Running `decode=` hooks over rows read by a torch loader (`conch.engines.torch.loader`).

A hook that fails on a value becomes a `conch.DecodeError` naming the table, the key (as the
user writes it in `t[key]`: the value, or a tuple for a composite key) and the column, with the
hook's own error as its cause. With `on_error="skip"` the rows whose values fail leave every
column of the block (so the columns stay aligned) and their errors are handed back to the
loader, which counts them (`ConchIterableDataset.skipped`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from conch.errors import DecodeError, InvalidArgumentError

ON_ERROR = ("raise", "skip")


@dataclass(frozen=True)
class Decoding:
    """The hooks by column path, and what a failure names and does."""

    hooks: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    table: str | None = None
    key_names: tuple[str, ...] = ()
    on_error: str = "raise"

    def __post_init__(self) -> None:
        if self.on_error not in ON_ERROR:
            raise InvalidArgumentError(
                f"on_error={self.on_error!r}: use 'raise' (a bad value stops the epoch) or 'skip' "
                "(its row is dropped and counted)"
            )


@dataclass
class Decoded:
    """Decoded values of the kept rows by column; `kept` the positions of the kept rows (None:
    all of them), `errors` one per dropped row."""

    values: dict[str, list[Any]]
    kept: np.ndarray | None
    errors: list[DecodeError]


def run_hooks(leaves: Mapping[str, Any], num_rows: int, decoding: Decoding) -> Decoded:
    """Decode the hooked columns of `leaves` (arrays by path); see the module doc."""
    failed: dict[int, DecodeError] = {}
    values: dict[str, list[Any]] = {}
    for name, hook in decoding.hooks.items():
        if name not in leaves:
            continue
        out: list[Any] = []
        for i, v in enumerate(leaves[name].to_pylist()):
            if i in failed:  # one error per row: its first bad column
                out.append(None)
                continue
            try:
                out.append(hook(v))
            except Exception as e:  # any hook error, Pillow's and the user's own: named below
                err = _named(e, decoding, leaves, name, i)
                if decoding.on_error == "raise":
                    raise err from e
                err.__cause__ = e
                failed[i] = err
                out.append(None)
        values[name] = out
    if not failed:
        return Decoded(values, None, [])
    kept = np.array([i for i in range(num_rows) if i not in failed], dtype=np.int64)
    values = {k: [v[i] for i in kept] for k, v in values.items()}
    return Decoded(values, kept, [failed[i] for i in sorted(failed)])


def _named(e: Exception, decoding: Decoding, leaves: Mapping[str, Any], column: str, row: int) -> DecodeError:
    names = decoding.key_names
    if names and all(n in leaves for n in names):
        parts = tuple(leaves[n][row].as_py() for n in names)
        key: object = parts[0] if len(parts) == 1 else parts
        where = f"key {key!r}"
    else:
        key, where = None, f"row {row}"
    table = f"table {decoding.table!r}, " if decoding.table else ""
    why = str(e) if isinstance(e, DecodeError) else f"{type(e).__name__}: {e}"
    return DecodeError(f"{table}{where}, column {column!r}: {why}", table=decoding.table, key=key, column=column)


def kept_rows(arr: pa.Array, kept: np.ndarray | None) -> pa.Array:
    """`arr` narrowed to the kept rows."""
    return arr if kept is None else arr.take(pa.array(kept))
