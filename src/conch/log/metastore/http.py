"""The client of `conch serve`: a `Metastore` over HTTP (`connect("http://host:port", token=...)`).

Data files never pass through the server: the client opens the storage the server advertises
(`GET /v1/config`) and writes and reads files there itself, so the server only sees commits.

Failures: a 4xx answer is a typed error at once (409 on append = `CommitConflictError`: refresh
and retry). No answer or a 5xx is retried with backoff for up to `retry_seconds` (a server
restarting); an append is retried with the same idempotency key, so it lands at most once, and
if the server never answers it raises `CommitStateUnknownError` (the files it references must
then stay: the commit may have happened). Other requests raise `MetastoreUnavailableError`.
"""

from __future__ import annotations

import os
import random
import threading
import time
import uuid
from typing import Any

from conch.errors import (
    AuthorizationError,
    CommitConflictError,
    CommitStateUnknownError,
    ConchError,
    InvalidNameError,
    MetastoreUnavailableError,
    TableExistsError,
    TableNotFoundError,
)
from conch.log.metastore.base import LogEntry, TableRecord
from conch.log.metastore.names import check_name
from conch.model.deps import optional_import

_CODES: dict[str, type[ConchError]] = {
    "table_not_found": TableNotFoundError,
    "table_exists": TableExistsError,
    "commit_conflict": CommitConflictError,
    "invalid_name": InvalidNameError,
}


class _NoAnswer(Exception):
    """No answer, or a 5xx: the request may or may not have been applied."""


class HttpMetastore:
    """A metastore served by `conch serve` at `url`; `token` is a bearer token (default: the
    `CONCH_TOKEN` environment variable). `client` injects an `httpx.Client` (e.g. Starlette's
    `TestClient` for an in-process server).

    >>> ms = HttpMetastore("http://127.0.0.1:8181", token="...")  # doctest: +SKIP
    >>> ms.warehouse  # doctest: +SKIP
    's3://bucket/warehouse'
    """

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        retry_seconds: float = 30.0,
        client: Any = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retry_seconds = retry_seconds
        self._token = token if token is not None else os.environ.get("CONCH_TOKEN")
        self._injected = client
        self._client: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        config = self._call("GET", "/v1/config")
        self.warehouse: str = config["warehouse"]
        self.scope: str = config["scope"]

    def __repr__(self) -> str:
        return f"HttpMetastore({self.url!r})"

    @property
    def uri(self) -> str:
        return self.url

    def _http(self) -> Any:
        if self._injected is not None:
            return self._injected
        with self._lock:
            if self._client is None or self._pid != os.getpid():  # sockets are not shared across fork()
                httpx = optional_import("httpx")
                self._client = httpx.Client(base_url=self.url, timeout=self.timeout)
                self._pid = os.getpid()
            return self._client

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        """One request; raises `_NoAnswer` for a transport failure or a 5xx, a typed error for a
        4xx, and returns the decoded JSON body (None for 204) otherwise."""
        httpx = optional_import("httpx")
        headers = {"Authorization": f"Bearer {self._token}"} if self._token else {}
        try:
            resp = self._http().request(method, path, headers=headers, **kwargs)
        except httpx.TransportError as e:
            raise _NoAnswer(f"{type(e).__name__}: {e}") from e
        if resp.status_code >= 500:
            raise _NoAnswer(f"HTTP {resp.status_code}: {resp.text[:300]}")
        if resp.status_code == 204:
            return None
        try:
            body = resp.json()
        except ValueError:
            body = {"error": "bad_response", "message": resp.text[:300]}
        if resp.status_code < 400:
            return body
        code, message = body.get("error", ""), body.get("message", resp.text[:300])
        if resp.status_code in (401, 403):
            raise AuthorizationError(f"{self.url}: {message}")
        raise _CODES.get(code, ConchError)(f"{self.url}{path}: {message} ({resp.status_code} {code})")

    def _call(self, method: str, path: str, *, what: str = "", **kwargs: Any) -> Any:
        """`_send`, retried with backoff while the server gives no answer."""
        deadline = time.monotonic() + self.retry_seconds
        attempt = 0
        while True:
            try:
                return self._send(method, path, **kwargs)
            except _NoAnswer as e:
                if time.monotonic() > deadline:
                    if what:
                        raise CommitStateUnknownError(
                            f"{what} to {self.url}: no answer after {self.retry_seconds:g}s ({e}); the commit may "
                            "have happened: look at the table's history before writing again"
                        ) from e
                    raise MetastoreUnavailableError(f"metastore {self.url} gives no answer: {e}") from e
                time.sleep(min(0.05 * 2**attempt, 1.0) * random.uniform(0.5, 1.0))
                attempt += 1

    # --- catalog -------------------------------------------------------------------------

    def create_table(self, record: TableRecord) -> None:
        check_name(record.name)
        body = {"name": record.name, "id": record.id, "created_us": record.created_us, "props": record.props}
        try:
            self._call("POST", "/v1/tables", json=body)
        except TableExistsError:
            if self.get_table(record.name) != record:  # not ours from a retry whose answer was lost
                raise

    def get_table(self, name: str) -> TableRecord:
        return TableRecord(**self._call("GET", f"/v1/tables/{check_name(name)}"))

    def list_tables(self) -> list[TableRecord]:
        return [TableRecord(**t) for t in self._call("GET", "/v1/tables")["tables"]]

    def drop_table(self, name: str) -> TableRecord:
        return TableRecord(**self._call("DELETE", f"/v1/tables/{check_name(name)}"))

    # --- the log -------------------------------------------------------------------------

    def append(self, table_id: str, expected_seq: int, entry: str) -> LogEntry:
        body = {"expected_seq": expected_seq, "entry": entry, "idempotency_key": uuid.uuid4().hex}
        path = f"/v1/logs/{check_name(table_id, 'table id')}"
        got = self._call("POST", path, json=body, what=f"commit {expected_seq + 1} of {table_id}")
        return LogEntry(got["seq"], got["time"], got["entry"])

    def read_log(self, table_id: str, after_seq: int = 0, upto_seq: int | None = None) -> list[LogEntry]:
        path = f"/v1/logs/{check_name(table_id, 'table id')}"
        out: list[LogEntry] = []
        after = max(after_seq, 0)
        while True:
            params: dict[str, int] = {"after": after}
            if upto_seq is not None:
                params["upto"] = max(upto_seq, 0)
            page = self._call("GET", path, params=params)
            out.extend(LogEntry(e["seq"], e["time"], e["entry"]) for e in page["entries"])
            if not page["more"] or not page["entries"]:
                return out
            after = out[-1].seq

    def last_seq(self, table_id: str) -> int:
        return int(self._call("GET", f"/v1/logs/{check_name(table_id, 'table id')}/last")["seq"])

    def seq_at_time(self, table_id: str, time_us: int) -> int:
        path = f"/v1/logs/{check_name(table_id, 'table id')}/at"
        return int(self._call("GET", path, params={"time_us": time_us})["seq"])

    # --- snapshots -----------------------------------------------------------------------

    def latest_snapshot(self, table_id: str, at_or_before_seq: int | None = None) -> tuple[int, str] | None:
        params = {} if at_or_before_seq is None else {"at_or_before": max(at_or_before_seq, 0)}
        got = self._call("GET", f"/v1/logs/{check_name(table_id, 'table id')}/snapshots/latest", params=params)
        snap = got["snapshot"]
        return (int(snap["seq"]), str(snap["path"])) if snap else None

    def snapshots(self, table_id: str) -> list[tuple[int, str]]:
        got = self._call("GET", f"/v1/logs/{check_name(table_id, 'table id')}/snapshots")
        return [(int(s["seq"]), str(s["path"])) for s in got["snapshots"]]

    def add_snapshot(self, table_id: str, seq: int, path: str) -> None:
        self._call("POST", f"/v1/logs/{check_name(table_id, 'table id')}/snapshots", json={"seq": seq, "path": path})

    def remove_snapshots(self, table_id: str, before_seq: int) -> None:
        path = f"/v1/logs/{check_name(table_id, 'table id')}/snapshots"
        self._call("DELETE", path, params={"before": max(before_seq, 0)})

    def check(self) -> list[str]:
        """Damage the server's metastore finds in its own storage."""
        return [str(p) for p in self._call("GET", "/v1/check")["problems"]]

    def close(self) -> None:
        with self._lock:
            if self._client is not None and self._pid == os.getpid():
                self._client.close()
            self._client = None
