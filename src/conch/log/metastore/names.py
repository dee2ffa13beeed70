"""Table names and ids as metastores accept them: safe as object keys and URL path segments."""

from __future__ import annotations

import re

from conch.errors import InvalidNameError

_SAFE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]{0,159}$")


def check_name(value: str, what: str = "table name") -> str:
    """`value` if it is a safe identifier, else `InvalidNameError` saying what is allowed:
    it starts with a letter or `_`, holds letters, digits, `_`, `.`, `-`, at most 160
    characters, and so never escapes its prefix of a warehouse (`..`, `/`, `%2F`)."""
    if not isinstance(value, str) or not _SAFE.fullmatch(value):
        raise InvalidNameError(
            f"invalid {what} {value!r}: start with a letter or '_', then letters, digits, '_', '.', '-' "
            "(at most 160 characters)"
        )
    return value
