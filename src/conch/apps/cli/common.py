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


def print_arrow(table: pa.Table, title: str) -> None:
    out = RichTable(title=title)
    flat = table.flatten().flatten().flatten()
    for name in flat.column_names:
        out.add_column(name, overflow="ellipsis", max_width=40)
    for row in flat.to_pylist():
        out.add_row(*(cell_text(v) for v in row.values()))
    console.print(out)


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
