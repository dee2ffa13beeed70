"""`conch serve`: open a warehouse and serve its metastore on uvicorn."""

from __future__ import annotations

import os

from conch.apps.server.app import MAX_REQUEST_BYTES, create_app
from conch.apps.server.auth import parse_tokens
from conch.errors import ConchError
from conch.log.metastore.registry import open_warehouse
from conch.model.deps import optional_import


def serve(
    warehouse: str | os.PathLike[str],
    host: str = "127.0.0.1",
    port: int = 8181,
    tokens: str = "",
    metastore: str | None = None,
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> None:
    """Serve the metastore of `warehouse` (or `metastore`, e.g. PostgreSQL) until stopped.
    `tokens`: `"tok=read,tok2=admin"`; at least one is required, so a server is never open to
    anyone by accident. Object-store credentials come from the environment."""
    uvicorn = optional_import("uvicorn")
    granted = parse_tokens(tokens)
    if not granted:
        raise ConchError("give at least one token: --tokens 'TOKEN=admin' (or CONCH_SERVER_TOKENS)")
    storage, meta = open_warehouse(warehouse, metastore=metastore)
    app = create_app(meta, storage.uri, granted, max_request_bytes=max_request_bytes)
    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
