"""The HTTP reference metastore server (`conch serve`): the `server` extra (FastAPI, uvicorn)."""

from conch.apps.server.app import create_app
from conch.apps.server.auth import SCOPES, TokenScopes, parse_tokens

__all__ = ["SCOPES", "TokenScopes", "create_app", "parse_tokens"]
