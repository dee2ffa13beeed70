"""A hostile client against `conch serve`: a deterministic generator walks every operation of the
server's own `/openapi.json` and replaces each path parameter, query parameter and body field in
turn with hostile values (non-finite numbers, huge integers, wrong types, lone surrogates, NUL
and control characters, traversal, oversize text), then sends hostile raw bodies (malformed and
deeply nested JSON, NaN literals, invalid UTF-8) to every operation that takes one.

Every generated request is invalid by construction, so the server must answer each with a JSON
4xx: never a 5xx (`answers >= 500`), never a 2xx (`accepted invalid inputs`). Afterwards the
table is still whole: what it lists and logs reads back through a normal client. Runs beside the
schemathesis fuzzing in `test_server.py`; the count of requests is fixed (see `_hostile_requests`).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pyarrow as pa
import pytest

import conch
from conch.apps.server import create_app
from conch.errors import CorruptFileError
from conch.log.metastore.sqlite import SqliteMetastore
from services import ServerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKENS = {"admin-token-1": "admin"}
ADMIN = {"Authorization": "Bearer admin-token-1"}
TABLE_ID = "t-0123abcd"

# Text no name, id, path, key or JSON document accepts.
HOSTILE_TEXT: list[str] = [
    "",
    "\x00",
    "a\x00b",
    "\x01",
    "\x7f",
    "\n",
    "a\tb",
    " ",
    "\ud800",
    "\udfff",
    "a\ud800b",
    "..",
    "../x",
    "a/../../b",
    "%2e%2e%2f",
    "/abs",
    "a\\b",
    "\u202e",
    "\ufffe",
    "x" * 10_000,
]
# Appended to a valid name, id or path, each still makes it invalid.
HOSTILE_SUFFIX: list[str] = [v for v in HOSTILE_TEXT if v not in ("", "..", "../x", "/abs")] + [
    "/../x",
    "/./x",
    "//x",
    "/",
]
# Non-finite numbers are JSON extensions Python's json accepts (and 1e999 overflows to inf):
# they are spliced into the body text in place of a marker.
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]
HOSTILE_INT_JSON: list[Any] = [-1, 2**62 + 1, 2**63, 10**30, 10**400, 1.5, 1.0, True, None, "1", "", [], {}, [1]]
HOSTILE_INT_QUERY = ["NaN", "nan", "inf", "-inf", "1e999", "1.5", "9" * 5000, "", "0x10", "1\x00", "\ud800"]
HOSTILE_BODIES: list[bytes] = [
    b"",
    b"null",
    b"[]",
    b"1",
    b'"text"',
    b"{",
    b"NaN",
    b'{"a": NaN}',
    b"\xff\xfe\x00",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"a":' * 50_000 + b"1" + b"}" * 50_000,
    b"1" * 100_000,
    b'{"' + b"x" * 100_000 + b'": 1}',
]
MARK = "__HOSTILE_NUMBER__"


@dataclass
class Req:
    method: str
    path: str
    params: dict[str, str]
    body: bytes | None
    what: str


def _valid_body(template: str) -> dict[str, Any]:
    if template == "/v1/tables":
        return {"name": "u", "id": "u-0123abcd", "created_us": 1, "props": '{"schema": {}}'}
    if template == "/v1/logs/{table_id}":
        return {"expected_seq": 1, "entry": '{"kind": "noop"}', "idempotency_key": "k-1"}
    if template == "/v1/logs/{table_id}/snapshots":
        return {"seq": 1, "path": f"{TABLE_ID}/meta/000000000001-ab.json"}
    raise AssertionError(f"no valid body known for POST {template}: add one")


def _valid_query(spec_params: list[dict[str, Any]]) -> dict[str, str]:
    values = {"time_us": "1", "before": "1", "after": "0", "upto": "1", "limit": "1", "at_or_before": "1"}
    return {p["name"]: values[p["name"]] for p in spec_params if p["in"] == "query" and p.get("required")}


def _encode(body: dict[str, Any], field: str, value: Any) -> bytes:
    doc = {**body, field: MARK if isinstance(value, str) and value in NON_FINITE else value}
    text = json.dumps(doc)  # ensure_ascii: a lone surrogate travels as a \ud800 escape
    if isinstance(value, str) and value in NON_FINITE:
        text = text.replace(json.dumps(MARK), value)
    return text.encode()


def _path(template: str, values: dict[str, str]) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", quote(v.encode("utf-8", "surrogatepass"), safe=""))
    return out


def _hostile_requests(spec: dict[str, Any]) -> Iterator[Req]:
    """Every request invalid in exactly one place (or in its whole body)."""
    for template, ops in spec["paths"].items():
        for method, op in ops.items():
            method = method.upper()
            params = op.get("parameters", [])
            path_values = {p["name"]: ("u" if p["name"] == "name" else TABLE_ID) for p in params if p["in"] == "path"}
            query = _valid_query(params)
            body = _valid_body(template) if "requestBody" in op else None
            raw = json.dumps(body).encode() if body is not None else None
            for p in params:
                name = p["name"]
                if p["in"] == "path":
                    for v in HOSTILE_TEXT[1:]:  # not "": that is another route
                        yield Req(method, _path(template, {**path_values, name: v}), query, raw, f"{name}={v!r:.40}")
                elif p["in"] == "query":
                    for v in HOSTILE_INT_QUERY + ([] if name == "time_us" else ["-1"]):  # before 1970 is a time
                        yield Req(method, _path(template, path_values), {**query, name: v}, raw, f"{name}={v!r:.40}")
            if body is None:
                continue
            url = _path(template, path_values)
            for field, good in body.items():
                values: list[Any] = (
                    [*NON_FINITE, *HOSTILE_INT_JSON]
                    if isinstance(good, int)
                    else [
                        *HOSTILE_TEXT,
                        *(good + v for v in HOSTILE_SUFFIX if not (good.startswith("{") and v.isspace())),
                        *NON_FINITE,
                        7,
                        None,
                        ["x"],
                        {"a": 1},
                    ]
                )
                for v in values:
                    if field == "idempotency_key" and v in ("", ".."):  # valid keys (the key is optional)
                        continue
                    yield Req(method, url, query, _encode(body, field, v), f"{field}={v!r:.40}")
            for field in body:
                rest = {k: v for k, v in body.items() if k != field}
                if field != "idempotency_key":  # optional
                    yield Req(method, url, query, json.dumps(rest).encode(), f"without {field}")
            for b in HOSTILE_BODIES:
                yield Req(method, url, query, b, f"body {b[:30]!r}")


def _send(client: TestClient, r: Req) -> Any:
    headers = {**ADMIN, "content-type": "application/json"} if r.body is not None else ADMIN
    query = "&".join(f"{k}={quote(v.encode('utf-8', 'surrogatepass'), safe='')}" for k, v in r.params.items())
    return client.request(r.method, f"{r.path}?{query}" if query else r.path, content=r.body, headers=headers)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[TestClient, Path]]:
    ms = SqliteMetastore(tmp_path / "c.sqlite")
    client = TestClient(create_app(ms, str(tmp_path), TOKENS), raise_server_exceptions=False)
    body = {"name": "t", "id": TABLE_ID, "created_us": 1, "props": '{"schema": {}}'}
    assert client.post("/v1/tables", json=body, headers=ADMIN).status_code == 201
    entry = {"expected_seq": 0, "entry": '{"kind": "noop"}'}
    assert client.post(f"/v1/logs/{TABLE_ID}", json=entry, headers=ADMIN).status_code == 200
    yield client, tmp_path


def test_hostile_requests_get_json_4xx(served: tuple[TestClient, Path]) -> None:
    client, _ = served
    spec = client.get("/openapi.json").json()
    tried, server_errors, accepted = _tally(client, spec)
    print(f"hostile requests tried: {tried}, answers >= 500: {len(server_errors)}, accepted: {len(accepted)}")
    assert tried > 600
    assert not server_errors, server_errors[:100]
    assert not accepted, accepted[:100]
    # nothing reached the log or the snapshot index
    assert client.get(f"/v1/logs/{TABLE_ID}/last", headers=ADMIN).json() == {"seq": 1}
    assert client.get(f"/v1/logs/{TABLE_ID}/snapshots", headers=ADMIN).json() == {"snapshots": []}
    assert [t["name"] for t in client.get("/v1/tables", headers=ADMIN).json()["tables"]] == ["t"]
    # ...though each request unchanged is accepted: they were refused for what was made hostile
    for template in ("/v1/tables", "/v1/logs/{table_id}", "/v1/logs/{table_id}/snapshots"):
        r = client.post(_path(template, {"table_id": TABLE_ID}), json=_valid_body(template), headers=ADMIN)
        assert r.status_code < 300, (template, r.text)


def _tally(client: Any, spec: dict[str, Any]) -> tuple[int, list[Any], list[Any]]:
    tried, server_errors, accepted = 0, [], []
    for r in _hostile_requests(spec):
        tried += 1
        try:
            got = _send(client, r)
        except httpx.TransportError as e:  # the server dropped the connection: no answer at all
            server_errors.append((r.method, r.path[:60], r.what, type(e).__name__))
            continue
        if got.status_code >= 500:
            server_errors.append((r.method, r.path[:60], r.what, got.status_code))
        elif got.status_code < 400:
            accepted.append((r.method, r.path[:60], r.what, got.status_code))
        else:
            doc = got.json()
            assert set(doc) >= {"error", "message"}, (r.what, doc)
    return tried, server_errors, accepted


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_hostile_requests_over_loopback(request: pytest.FixtureRequest, tmp_path: Path, backend: str) -> None:
    """The same requests to `conch serve` in its own process (uvicorn parses them off the
    socket), over the default SQLite metastore and over PostgreSQL (which refuses NUL in text)."""
    extra = {}
    if backend == "postgres":
        extra["metastore"] = request.getfixturevalue("postgres").dsn()
    server = ServerProcess(str(tmp_path / "wh"), TOKENS, **extra).start()
    try:
        with httpx.Client(base_url=server.url, timeout=60) as client:
            body = {"name": "t", "id": TABLE_ID, "created_us": 1, "props": '{"schema": {}}'}
            assert client.post("/v1/tables", json=body, headers=ADMIN).status_code == 201
            entry = {"expected_seq": 0, "entry": '{"kind": "noop"}'}
            assert client.post(f"/v1/logs/{TABLE_ID}", json=entry, headers=ADMIN).status_code == 200
            tried, server_errors, accepted = _tally(client, client.get("/openapi.json").json())
            print(
                f"{backend}: hostile requests tried: {tried}, answers >= 500: {len(server_errors)}, accepted: {len(accepted)}"
            )
            assert not server_errors, server_errors[:20]
            assert not accepted, accepted[:20]
            assert client.get(f"/v1/logs/{TABLE_ID}/last", headers=ADMIN).json() == {"seq": 1}
            assert client.get(f"/v1/logs/{TABLE_ID}/snapshots", headers=ADMIN).json() == {"snapshots": []}
    finally:
        server.stop()


def test_server_refuses_a_nul_snapshot_path(served: tuple[TestClient, Path]) -> None:
    client, _ = served
    for path in (f"{TABLE_ID}/meta/\x00.json", f"{TABLE_ID}/meta/a\x01.json", f"{TABLE_ID}/meta/\ud800.json"):
        body = json.dumps({"seq": 1, "path": path}).encode()
        r = client.post(f"/v1/logs/{TABLE_ID}/snapshots", content=body, headers=ADMIN)
        assert r.status_code in (400, 422), (path, r.status_code, r.text[:200])


@pytest.mark.parametrize("bad", ["meta/\x00.json", "meta/../../x.json", "meta/a\nb.json"])
def test_a_bad_registered_snapshot_path_is_a_typed_error(tmp_path: Path, bad: str) -> None:
    """A metastore that already holds a bad snapshot path (registered before the server checked,
    or written by hand) makes reads raise `CorruptFileError` naming it, and `check()` report it."""
    ms = SqliteMetastore(tmp_path / "c.sqlite")
    t = conch.connect(tmp_path, metastore=ms).create_table("t", [("id", pa.int64())])
    t.write([{"id": 1}])
    t.write([{"id": 2}])
    tid = ms.get_table("t").id
    ms.add_snapshot(tid, 1, f"{tid}/{bad}")
    fresh = conch.connect(tmp_path, metastore=SqliteMetastore(tmp_path / "c.sqlite")).table("t")
    with pytest.raises(CorruptFileError, match="snapshot"):
        fresh.scan(version=1).to_arrow()
    report = fresh.check()
    assert not report.ok and any(bad in p.file for p in report.problems)
