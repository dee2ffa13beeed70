"""The HTTP reference metastore: any `Metastore` served to remote clients and Spark executors.

`create_app(metastore, warehouse, tokens)` is an ASGI app (FastAPI); `conch serve` runs it on
uvicorn. The commit endpoint follows the Iceberg REST catalog's rules and adds to them:

- `POST /v1/logs/{table_id}` appends one entry with compare-and-swap on `expected_seq`;
  **409** means the log moved on: refresh and retry (nothing was written);
- **5xx** (or no answer) means the outcome is unknown: the client must not delete the files the
  entry references, and may retry with the same `idempotency_key`;
- a retried append is recognised by its idempotency key while the server runs, and after a
  restart by finding the identical entry at the sequence number it expected, so it is applied
  once (the log is the durable record of what was applied).

Every endpoint but `/openapi.json` needs a bearer token of the right scope (`auth.py`); table
names and ids are validated (no path traversal into other tables' prefixes); bodies above
`max_request_bytes` get 413; every error is JSON `{"error": code, "message": text}`.
"""

# No `from __future__ import annotations`: FastAPI reads the route signatures at run time, and
# their scope dependencies are closures it could not resolve from strings.

import json
import math
import reprlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from conch.apps.server.auth import TokenScopes
from conch.errors import (
    CommitConflictError,
    CommitStateUnknownError,
    ConchError,
    InvalidNameError,
    MetastoreUnavailableError,
    StorageError,
    TableExistsError,
    TableNotFoundError,
)
from conch.files.integrity import bad_snapshot_path
from conch.log.metastore.base import LogEntry, Metastore, TableRecord
from conch.model.lru import Lru

API_VERSION = 1
NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_.\-]{0,159}$"
MAX_SEQ = 2**62
MAX_REQUEST_BYTES = 32 * 1024 * 1024
LOG_PAGE = 1000

Name = Annotated[str, Path(pattern=NAME_PATTERN, max_length=160, description="a table name")]
TableId = Annotated[str, Path(pattern=NAME_PATTERN, max_length=160, description="a table id")]
Seq = Annotated[int, Query(ge=0, le=MAX_SEQ)]
IDEMPOTENCY_KEY = r"^[A-Za-z0-9_.:\-]{0,128}$"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _json_text(value: str) -> str:
    """`value` if it is a JSON document storable as UTF-8 (an entry, a table's props; the
    metastore keeps them as opaque text): anything else would be stored and then break every
    client that reads it."""
    try:
        value.encode("utf-8")  # a lone surrogate cannot be stored
        json.loads(value, parse_constant=_refuse_constant)
    except (ValueError, RecursionError) as e:  # UnicodeEncodeError and JSONDecodeError are ValueErrors
        raise ValueError(f"not a JSON document: {_printable(str(e))}") from None
    return value


JsonText = Annotated[str, AfterValidator(_json_text)]


def _printable(text: str, limit: int = 300) -> str:
    """`text` as JSON can always encode it: lone surrogates escaped, cut at `limit`."""
    text = text if len(text) <= limit else text[:limit] + "..."
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _echo(value: Any) -> Any:
    """A value of a validation error as the 422 answer can show it: non-finite floats and lone
    surrogates are what the JSON encoder refuses (they were 500s), nested input is summarised."""
    if isinstance(value, str):
        return _printable(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bool | int | float) or value is None:
        return value if not isinstance(value, int) or abs(value) <= MAX_SEQ else _printable(reprlib.repr(value))
    return _printable(reprlib.repr(value))


class ErrorBody(BaseModel):
    error: str = Field(description="machine-readable code: table_not_found, commit_conflict, ...")
    message: str


class TableModel(BaseModel):
    model_config = ConfigDict(strict=True)

    name: str = Field(pattern=NAME_PATTERN, max_length=160)
    id: str = Field(pattern=NAME_PATTERN, max_length=160)
    created_us: int = Field(ge=0, le=MAX_SEQ)
    props: str = Field(description="JSON: the table's key schema and initial schema")


class TableList(BaseModel):
    tables: list[TableModel]


class NewTable(TableModel):
    props: JsonText = Field(description="JSON: the table's key schema and initial schema")


class EntryModel(BaseModel):
    seq: int
    time: int = Field(description="commit time, µs since the epoch")
    entry: str


class EntryList(BaseModel):
    entries: list[EntryModel]
    more: bool = Field(description="true when the page is full: ask again after the last seq")


class AppendRequest(BaseModel):
    model_config = ConfigDict(strict=True)

    expected_seq: int = Field(ge=0, le=MAX_SEQ, description="the log's last seq as the client saw it")
    entry: JsonText = Field(description="the entry's JSON document")
    idempotency_key: str = Field(
        default="",
        max_length=128,
        pattern=IDEMPOTENCY_KEY,
        description="letters, digits, '_', '.', ':', '-'; the same key on a retry makes the append happen at most once",
    )


class SeqBody(BaseModel):
    seq: int


class SnapshotModel(BaseModel):
    model_config = ConfigDict(strict=True)

    seq: int = Field(ge=0, le=MAX_SEQ)
    path: str = Field(min_length=1, max_length=1024)


class SnapshotList(BaseModel):
    snapshots: list[SnapshotModel]


class LatestSnapshot(BaseModel):
    snapshot: SnapshotModel | None


class CheckBody(BaseModel):
    problems: list[str]


class ServerConfig(BaseModel):
    api: int
    warehouse: str = Field(description="where the data files are: clients open this storage")
    scope: str = Field(description="the scope of the token that asked")


class _ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        self.status, self.code, self.message, self.headers = status, code, message, headers


_ERRORS: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorBody, "description": text}
    for code, text in (
        (400, "bad request"),
        (401, "no or unknown bearer token"),
        (403, "the token lacks the scope"),
        (404, "no such table"),
        (409, "conflict: the table exists, or the log moved on (refresh and retry)"),
        (413, "request body too large"),
        (503, "the backing metastore failed; for an append the outcome is unknown"),
    )
}


class _BodyLimit:
    """Refuse request bodies above `limit` bytes with 413 before the app parses them."""

    def __init__(self, app: Any, limit: int) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]], send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.limit):
            await self._refuse(send, 413 if declared.isdigit() else 400)
            return
        chunks, size, more = [], 0, True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                await self.app(scope, receive, send)
                return
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > self.limit:
                await self._refuse(send, 413)
                return
            more = message.get("more_body", False)
        body, replayed = b"".join(chunks), False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _refuse(self, send: Any, status: int) -> None:
        code = "request_too_large" if status == 413 else "bad_request"
        text = f"request body above {self.limit} bytes" if status == 413 else "malformed Content-Length"
        payload = json.dumps({"error": code, "message": text}).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": payload})


class _Idempotency:
    """Recent appends by idempotency key (bounded): a retry whose first attempt succeeded gets
    the same answer instead of a second entry or a spurious conflict."""

    def __init__(self, size: int = 10_000) -> None:
        self._items: Lru[str, tuple[str, int, str, LogEntry]] = Lru(max_entries=size)

    def get(self, key: str, table_id: str, expected: int, entry: str) -> LogEntry | None:
        hit = self._items.get(key)
        if hit is None:
            return None
        if hit[:3] != (table_id, expected, entry):
            raise _ApiError(400, "idempotency_key_reused", "this idempotency key was used for another append")
        return hit[3]

    def put(self, key: str, table_id: str, expected: int, entry: str, result: LogEntry) -> None:
        self._items.put(key, (table_id, expected, entry, result))


def create_app(
    metastore: Metastore,
    warehouse: str,
    tokens: Mapping[str, str],
    max_request_bytes: int = MAX_REQUEST_BYTES,
) -> Any:
    """The ASGI app serving `metastore`; `warehouse` is the storage URI clients are told to
    open for data files; `tokens` maps bearer tokens to scopes (`read`, `write`, `admin`)."""
    scopes = TokenScopes(tokens)
    recent = _Idempotency()
    known_ids: set[str] = set()
    bearer = HTTPBearer(auto_error=False, description="a token configured with `conch serve --tokens`")
    app = FastAPI(
        title="Conch metastore",
        version=str(API_VERSION),
        description=__doc__,
        docs_url=None,
        redoc_url=None,
        responses=_ERRORS,
    )

    def need(scope: str) -> Any:
        def check(creds: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)]) -> str:
            if creds is None:
                raise _ApiError(
                    401, "unauthorized", "send Authorization: Bearer <token>", {"WWW-Authenticate": "Bearer"}
                )
            granted = scopes.scope_of(creds.credentials)
            if granted is None:
                raise _ApiError(401, "unauthorized", "unknown token", {"WWW-Authenticate": "Bearer"})
            if not TokenScopes.allows(granted, scope):
                raise _ApiError(403, "forbidden", f"this needs a token with scope {scope!r}; yours has {granted!r}")
            return granted

        return Depends(check)

    def table_exists(table_id: str) -> None:
        """Log operations address a table by id: refuse ids of no table (a stray append would
        otherwise start a log nobody can see)."""
        if table_id in known_ids:
            return
        known_ids.update(r.id for r in metastore.list_tables())
        if table_id not in known_ids:
            raise _ApiError(404, "table_not_found", f"no table with id {table_id!r}")

    @app.exception_handler(_ApiError)
    async def _api_error(_: Request, e: _ApiError) -> JSONResponse:
        return JSONResponse({"error": e.code, "message": e.message}, e.status, headers=e.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, e: RequestValidationError) -> JSONResponse:
        detail = [
            {
                "loc": [_echo(x) for x in err.get("loc", ())],
                "msg": _echo(err.get("msg", "")),
                "type": _echo(err.get("type", "")),
                "input": _echo(err.get("input")),
            }
            for err in e.errors()[:20]
        ]
        return JSONResponse({"error": "invalid_request", "message": "the request is malformed", "detail": detail}, 422)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "bad_request")
        return JSONResponse({"error": code, "message": str(e.detail)}, e.status_code, headers=e.headers)

    @app.exception_handler(ConchError)
    async def _conch(_: Request, e: ConchError) -> JSONResponse:
        status, code = 400, "bad_request"
        if isinstance(e, TableNotFoundError):
            status, code = 404, "table_not_found"
        elif isinstance(e, TableExistsError):
            status, code = 409, "table_exists"
        elif isinstance(e, CommitConflictError):
            status, code = 409, "commit_conflict"
        elif isinstance(e, InvalidNameError):
            status, code = 400, "invalid_name"
        elif isinstance(e, CommitStateUnknownError):
            status, code = 503, "commit_state_unknown"
        elif isinstance(e, MetastoreUnavailableError | StorageError):
            status, code = 503, "unavailable"
        return JSONResponse({"error": code, "message": str(e)}, status)

    @app.get("/v1/config", response_model=ServerConfig, tags=["catalog"])
    def config(scope: Annotated[str, need("read")]) -> ServerConfig:
        """The storage clients open for data files, and the scope of the caller's token."""
        return ServerConfig(api=API_VERSION, warehouse=warehouse, scope=scope)

    @app.get("/v1/check", response_model=CheckBody, tags=["catalog"])
    def check(_: Annotated[str, need("read")]) -> CheckBody:
        """Damage the backing metastore finds in its own storage (`Table.check()`)."""
        return CheckBody(problems=metastore.check())

    @app.get("/v1/tables", response_model=TableList, tags=["catalog"])
    def list_tables(_: Annotated[str, need("read")]) -> TableList:
        return TableList(tables=[TableModel(**_asdict(r)) for r in metastore.list_tables()])

    @app.post("/v1/tables", status_code=201, response_model=TableModel, tags=["catalog"])
    def create_table(body: NewTable, _: Annotated[str, need("write")]) -> TableModel:
        metastore.create_table(TableRecord(body.name, body.id, body.created_us, body.props))
        known_ids.add(body.id)
        return TableModel(**body.model_dump())

    @app.get("/v1/tables/{name}", response_model=TableModel, tags=["catalog"])
    def get_table(name: Name, _: Annotated[str, need("read")]) -> TableModel:
        return TableModel(**_asdict(metastore.get_table(name)))

    @app.delete("/v1/tables/{name}", response_model=TableModel, tags=["catalog"])
    def drop_table(name: Name, _: Annotated[str, need("admin")]) -> TableModel:
        rec = metastore.drop_table(name)
        known_ids.discard(rec.id)
        return TableModel(**_asdict(rec))

    @app.post("/v1/logs/{table_id}", response_model=EntryModel, tags=["log"])
    def append(table_id: TableId, body: AppendRequest, _: Annotated[str, need("write")]) -> EntryModel:
        """Append entry `expected_seq + 1` if the log is still at `expected_seq` (409 if not)."""
        key = body.idempotency_key
        if key and (hit := recent.get(key, table_id, body.expected_seq, body.entry)) is not None:
            return EntryModel(seq=hit.seq, time=hit.time, entry=hit.entry)
        table_exists(table_id)
        try:
            done = metastore.append(table_id, body.expected_seq, body.entry)
        except CommitConflictError:
            # Ours already, from an attempt whose answer was lost (before a restart, say)?
            there = metastore.read_log(table_id, body.expected_seq, body.expected_seq + 1)
            if not (key and there and there[0].entry == body.entry):
                raise
            done = there[0]
        if key:
            recent.put(key, table_id, body.expected_seq, body.entry, done)
        return EntryModel(seq=done.seq, time=done.time, entry=done.entry)

    @app.get("/v1/logs/{table_id}", response_model=EntryList, tags=["log"])
    def read_log(
        table_id: TableId,
        _: Annotated[str, need("read")],
        after: Seq = 0,
        upto: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
        limit: Annotated[int, Query(ge=1, le=10 * LOG_PAGE)] = LOG_PAGE,
    ) -> EntryList:
        """Entries after `after` up to `upto` (inclusive), at most `limit` of them."""
        bound = min(upto if upto is not None else MAX_SEQ, after + limit)
        got = metastore.read_log(table_id, after, bound)
        more = len(got) == limit and (upto is None or bound < upto)
        return EntryList(entries=[EntryModel(seq=e.seq, time=e.time, entry=e.entry) for e in got], more=more)

    @app.get("/v1/logs/{table_id}/last", response_model=SeqBody, tags=["log"])
    def last_seq(table_id: TableId, _: Annotated[str, need("read")]) -> SeqBody:
        return SeqBody(seq=metastore.last_seq(table_id))

    @app.get("/v1/logs/{table_id}/at", response_model=SeqBody, tags=["log"])
    def seq_at_time(
        table_id: TableId, time_us: Annotated[int, Query(ge=-MAX_SEQ, le=MAX_SEQ)], _: Annotated[str, need("read")]
    ) -> SeqBody:
        """The last sequence number committed at or before `time_us` (0 if none)."""
        return SeqBody(seq=metastore.seq_at_time(table_id, time_us))

    @app.get("/v1/logs/{table_id}/snapshots/latest", response_model=LatestSnapshot, tags=["snapshots"])
    def latest_snapshot(
        table_id: TableId,
        _: Annotated[str, need("read")],
        at_or_before: Annotated[int | None, Query(ge=0, le=MAX_SEQ)] = None,
    ) -> LatestSnapshot:
        got = metastore.latest_snapshot(table_id, at_or_before)
        return LatestSnapshot(snapshot=SnapshotModel(seq=got[0], path=got[1]) if got else None)

    @app.get("/v1/logs/{table_id}/snapshots", response_model=SnapshotList, tags=["snapshots"])
    def snapshots(table_id: TableId, _: Annotated[str, need("read")]) -> SnapshotList:
        """Every registered snapshot, oldest first."""
        return SnapshotList(snapshots=[SnapshotModel(seq=s, path=p) for s, p in metastore.snapshots(table_id)])

    @app.post("/v1/logs/{table_id}/snapshots", status_code=204, tags=["snapshots"])
    def add_snapshot(table_id: TableId, body: SnapshotModel, _: Annotated[str, need("write")]) -> None:
        """Register a flushed snapshot file; it must lie under the table's own prefix, each part
        of its path letters, digits, `_`, `.`, `-`."""
        if (why := bad_snapshot_path(body.path, table_id)) is not None:
            raise _ApiError(400, "invalid_path", f"invalid snapshot path {_printable(repr(body.path), 200)}: {why}")
        table_exists(table_id)
        metastore.add_snapshot(table_id, body.seq, body.path)

    @app.delete("/v1/logs/{table_id}/snapshots", status_code=204, tags=["snapshots"])
    def remove_snapshots(table_id: TableId, before: Seq, _: Annotated[str, need("write")]) -> None:
        """Forget the snapshots registered below sequence number `before` (vacuum under the
        expire horizon; the client deletes their files afterwards)."""
        table_exists(table_id)
        metastore.remove_snapshots(table_id, before)

    return _BodyLimit(app, max_request_bytes)


def _asdict(r: TableRecord) -> dict[str, Any]:
    return {"name": r.name, "id": r.id, "created_us": r.created_us, "props": r.props}
