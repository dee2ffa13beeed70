"""Bearer tokens with scopes: `read` < `write` < `admin` (each includes the ones before it).

| scope | may |
|---|---|
| read | list and read tables, logs, snapshots, the server's configuration |
| write | also create tables, append to logs (commit), register and forget snapshots |
| admin | also drop tables |

Tokens are configured as `token=scope` pairs (`conch serve --tokens`, or the environment
variable `CONCH_SERVER_TOKENS`); they are compared in constant time.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping

from conch.errors import ConchError

SCOPES = ("read", "write", "admin")


def parse_tokens(text: str) -> dict[str, str]:
    """`"tokA=read,tokB=admin"` → `{"tokA": "read", "tokB": "admin"}`; names what is wrong."""
    tokens: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        token, sep, scope = part.rpartition("=")
        if not sep or not token or scope not in SCOPES:
            raise ConchError(f"bad token entry {part!r}: write token=scope with scope one of {', '.join(SCOPES)}")
        if len(token) < 8:
            raise ConchError("a token must be at least 8 characters long")
        tokens[token] = scope
    return tokens


class TokenScopes:
    """Which scope a presented bearer token grants."""

    def __init__(self, tokens: Mapping[str, str]) -> None:
        bad = {s for s in tokens.values() if s not in SCOPES}
        if bad:
            raise ConchError(f"unknown token scope(s) {sorted(bad)}: use {', '.join(SCOPES)}")
        self._tokens = [(t.encode(), s) for t, s in tokens.items()]

    def scope_of(self, presented: str) -> str | None:
        """The scope of `presented`, or None for an unknown token (every entry is compared, so
        timing does not tell how much of a token matched)."""
        found = None
        for token, scope in self._tokens:
            if hmac.compare_digest(token, presented.encode()):
                found = scope
        return found

    @staticmethod
    def allows(granted: str, needed: str) -> bool:
        return SCOPES.index(granted) >= SCOPES.index(needed)
