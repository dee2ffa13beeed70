"""Which string columns a Vortex file stores dictionary-encoded (`ScanOptions.compact_types`).

Vortex 0.90 hands a column stored as a `dict` array back as an Arrow dictionary array when the
requested schema says dictionary: codes and a few values, cheaper than materialising the strings
(l_returnflag of TPC-H lineitem, 855 k rows: 1 ms vs 7 ms). Asked the same of a column stored
otherwise (FSST), it builds the dictionary with a hash pass (l_comment: 76 ms vs 20 ms), so a scan
asks for dictionaries only where the file's first chunk of the column is a `dict`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

MAX_ENTRIES = 1 << 16  # (file, column) answers kept; files are immutable, so a path is a valid key


def dictionary_columns(
    cache: dict[tuple[str, str], bool],
    open_file: Callable[[Any], Any],
    ref: Any,
    columns: Sequence[str],
    damage: Callable[[Any, str, Exception], Exception],
) -> frozenset[str]:
    """The `columns` of the Vortex file `ref` (opened by `open_file(ref)`) whose first chunk is a
    Vortex `dict` array; answers cached in `cache`, read errors raised as `damage(ref, what, e)`."""
    out = set()
    for c in columns:
        known = cache.get((ref.path, c))
        if known is None:
            try:
                first = next(iter(open_file(ref).scan([c])), None)
            except Exception as e:
                raise damage(ref, f"cannot read {c} from {ref.path}", e) from e
            known = first is not None and first.field(c).id == "vortex.dict"
            if len(cache) >= MAX_ENTRIES:
                cache.clear()
            cache[(ref.path, c)] = known
        if known:
            out.add(c)
    return frozenset(out)
