"""The `conch` command line: create, write, read, delete and look at tables.

conch --warehouse W tables | schema T | history T | manifests T | scan T ... | get T KEY | check T
conch --warehouse W create T --key id:uint64 | write T FILES | ingest FILES -t T --key id
conch --warehouse W ingest-media FOLDER -t T [--pattern "*.jpg"]   (one row per media file)
conch --warehouse W delete T KEYS | delete T --where EXPR | drop T --yes | vacuum T | flush T
conch --warehouse W expire T --older-than 7d | --retain-last N
conch --warehouse W tag T NAME | untag T NAME | tags T | changes T --since V
conch --warehouse W branch T NAME | branches T | drop-branch T NAME | fast-forward T NAME
                    (any command reads or writes a branch as T@NAME)

One module per kind of command: `look` (reading), `edit` (changing), `maintain`, `serve`;
`common` holds the app, the global options and how values are shown.
conch --warehouse W create-index T COL | indexes T | build-indexes T | search T --vector .. | search-text T Q
conch --warehouse W ui            (the web inspector: the `server` extra)
conch --warehouse W enrich T      (Spark pipelines: the `spark` extra; `ingest --spark` too)

Every error is one line, `error: <what> <how to fix it>`, on stderr with exit code 2;
`--debug` shows the traceback instead.
"""

from __future__ import annotations

import sys

import typer
from rich.text import Text

from conch.apps.cli import edit, look, maintain, media, search, serve, tags  # noqa: F401  (importing them registers their commands)
from conch.apps.cli.common import app, err_console
from conch.errors import ConchError

__all__ = ["app", "main"]


def main() -> None:
    """Run the CLI: usage and `ConchError`s print one `error:` line (no traceback without --debug)."""
    from typer.exceptions import Abort, TyperException

    command = typer.main.get_command(app)
    debug = "--debug" in sys.argv[1:]
    try:
        code = command.main(sys.argv[1:], prog_name="conch", standalone_mode=False)
    except TyperException as e:  # usage errors (typer's own click): one line, like ours
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())
            sys.exit(0)
        cmd = ctx.command_path if ctx is not None else "conch"
        _fail(f"{e.format_message()}{_suggestion(e.format_message())} (see `{cmd} --help`)", debug)
    except Abort:
        _fail("aborted", False)
    except (ConchError, ValueError, KeyError, OSError, ImportError) as e:
        _fail(_message(e), debug)
    sys.exit(code if isinstance(code, int) else 0)


# commands of other tools a new user types first, and the conch command that does it
SIMILAR = {
    "ls": "tables",
    "list": "tables",
    "show": "get (records by key) or scan",
    "cat": "scan",
    "head": "scan --limit 10",
    "select": "scan",
    "query": "scan --where",
    "rm": "delete (keys) or drop (a table)",
    "remove": "delete (keys) or drop (a table)",
    "log": "history",
    "describe": "schema",
    "info": "schema",
    "import": "ingest",
    "load": "ingest",
    "insert": "write",
}


def _suggestion(message: str) -> str:
    import re

    m = re.match(r"No such command '([^']+)'", message)
    if m is None or m.group(1).lower() not in SIMILAR:
        return ""
    return f"; for that use `conch {SIMILAR[m.group(1).lower()]}`"


def _message(e: BaseException) -> str:
    if isinstance(e, FileNotFoundError):
        return f"no such file: {e.filename}"
    if isinstance(e, KeyError) and e.args:
        return str(e.args[0])
    return " ".join(str(e).split("\n")[0].split()) or type(e).__name__


def _fail(message: str, debug: bool) -> None:
    if debug:
        raise
    err_console.print(Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True)
    sys.exit(2)
