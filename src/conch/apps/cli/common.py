"""What every command shares: the Typer app, consoles, global options, the catalog and how
values, keys and times are shown.

**User data is shown literally.** Table names, keys, column names, cell values, file paths and
filters reach the terminal through rich, whose markup would read `[bold]` as a style (the text
vanishes), `/a/b.png` in a title as a closing tag (a `MarkupError` traceback) and `:smile:` as an
emoji. Both consoles here therefore have markup and emoji codes off: every `str` given to them or
to a rich `Table` on them (titles, headers, cells, messages) is printed as it is. Styling is done
with `rich.text.Text` objects (`styled`), never with markup in a string.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

import pyarrow as pa
import typer
from rich.console import Console
from rich.table import Table as RichTable
from rich.text import Text

import conch
from conch.apps.previews import describe
from conch.errors import InvalidKeyError
from conch.model.keys import decode_key
from conch.model.progress import human_bytes

app = typer.Typer(help="Conch: keyed, column-grouped tables for ML data.", no_args_is_help=True, add_completion=False)
# markup=False, emoji=False: see the module docstring (every str is user data, shown literally)
console = Console(markup=False, emoji=False)
err_console = Console(stderr=True, markup=False, emoji=False)


def styled(text: object, style: str) -> Text:
    """`text` in a rich `style` (e.g. "dim", "red"), never read as markup."""
    return Text(str(text), style=style)


Warehouse = Annotated[
    str, typer.Option("--warehouse", "-w", envvar="CONCH_WAREHOUSE", help="Warehouse directory (default .conch)")
]
settings: dict[str, Any] = {"warehouse": ".conch", "debug": False, "progress": None}


@app.callback()
def _main(
    warehouse: Warehouse = ".conch",
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks instead of one-line errors")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars")] = False,
) -> None:
    settings["warehouse"] = warehouse
    settings["debug"] = debug
    settings["progress"] = False if quiet else None


def open_catalog(create: bool = False) -> conch.Catalog:
    # create=False: a read-only command on a mistyped path says so instead of making a warehouse.
    return conch.connect(settings["warehouse"], create=create)


def when(us: int | None, short: bool = False) -> str:
    if us is None:
        return "N/A"
    t = datetime.fromtimestamp(us / 1_000_000, tz=UTC)
    return t.strftime("%Y-%m-%d %H:%M:%S") if short else str(t)


def key_span(lo_hex: str, hi_hex: str, fields: list[pa.Field]) -> str:
    def show(h: str) -> str:
        vals = decode_key(bytes.fromhex(h), fields)
        return ",".join(str(v) for v in vals) if vals else "()"

    return f"{show(lo_hex)}..{show(hi_hex)}"


def parse_keys(text: str, fields: list[pa.Field]) -> list[tuple[Any, ...]]:
    """`--keys` text as key tuples typed like the key columns ('/' separates a key's columns)."""
    parts = [k.split("/") for k in text.split(",") if k.strip()]
    bad = [p for p in parts if len(p) != len(fields)]
    if bad:
        names = "/".join(f.name for f in fields)
        raise InvalidKeyError(f"--keys: {'/'.join(bad[0])!r} is not a key of columns {names}; write keys like {names}")
    cols = []
    for i, f in enumerate(fields):
        try:
            cols.append(pa.array([p[i].strip() for p in parts]).cast(f.type).to_pylist())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidKeyError(f"--keys: key column {f.name!r} is {f.type}, got {[p[i] for p in parts]}: {e}") from e
    return list(zip(*cols, strict=True))


TEXT_PREFIX = 200  # characters of a text value a terminal row shows (the rest is folded to its size)
MIN_COLUMN = 10  # the narrowest column a terminal table gives a value (else fewer columns are shown)


def print_arrow(table: pa.Table, title: str) -> None:
    """`table` as a terminal table: long text folded to a prefix and its size in Arrow, before any
    value becomes a Python object (a 300 MB caption is never copied to print 80 columns of it),
    and on a narrow terminal the leading columns that fit, with a note naming the others."""
    flat = table.flatten().flatten().flatten()
    names = flat.column_names
    shown = _columns_that_fit(flat, console.width)
    out = RichTable(title=title)
    for name in names[:shown]:
        out.add_column(name, overflow="ellipsis", max_width=40)
    cells = [_cells(flat.column(i)) for i in range(shown)]
    for row in zip(*cells, strict=True) if cells else ():
        out.add_row(*row)
    if shown < len(names):
        out.caption = (
            f"{len(names) - shown} more column(s) not shown on a {console.width}-column terminal "
            f"({', '.join(names[shown : shown + 4])}{', ...' if len(names) > shown + 4 else ''}): "
            "choose with --columns, or --format json"
        )
    console.print(out)


def _columns_that_fit(flat: pa.Table, width: int) -> int:
    """How many leading columns fit `width` with at least `MIN_COLUMN` characters (or their
    header's, if narrower) each: at least one."""
    used, n = 1, 0
    for name in flat.column_names:
        used += min(max(len(name), 4), MIN_COLUMN) + 3  # padding and the border
        if used > width and n:
            break
        n += 1
    return n


def _cells(col: pa.ChunkedArray) -> list[str | Text]:
    """The cells of one column; text longer than `TEXT_PREFIX` as its prefix and size."""
    import pyarrow.compute as pc

    if not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type)) or len(col) == 0:
        return [cell_text(v) for v in col.to_pylist()]
    sizes = pc.binary_length(col).to_pylist()
    prefixes = pc.utf8_slice_codeunits(col, 0, TEXT_PREFIX).to_pylist()
    out: list[str | Text] = []
    for prefix, size in zip(prefixes, sizes, strict=True):
        if size is not None and size > TEXT_PREFIX:
            out.append(Text(f"[{human_bytes(size)} text] {prefix[:40]}…", no_wrap=True, overflow="ellipsis"))
        else:
            out.append(cell_text(prefix))
    return out


def cell_text(v: Any) -> str | Text:
    if v is None:
        return styled("null", "dim")
    return describe(v)


def json_default(v: Any) -> Any:
    if isinstance(v, bytes):
        import base64

        return base64.b64encode(v).decode()
    if isinstance(v, datetime):
        return v.isoformat()
    return str(v)


def same_key(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return all(x == y or (isinstance(x, datetime) and x.replace(tzinfo=None) == y) for x, y in zip(a, b, strict=True))


def key_text(k: tuple[Any, ...]) -> str:
    return ",".join(str(v) for v in k)


def flatten_record(rec: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for name, value in rec.items():
        path = f"{prefix}{name}"
        if isinstance(value, dict):
            out.extend(flatten_record(value, path + "."))
        else:
            out.append((path, value))
    return out
