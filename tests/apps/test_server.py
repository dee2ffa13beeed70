"""The HTTP reference metastore: auth on every endpoint, bad requests, fuzzing from its own
OpenAPI description (zero 5xx), and a server killed and restarted under concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import schemathesis
from hypothesis import settings

import conch
from conch.apps.server import create_app, parse_tokens
from conch.errors import AuthorizationError, ConchError, InvalidNameError
from conch.log.metastore.http import HttpMetastore
from conch.log.metastore.sqlite import SqliteMetastore
from services import ServerProcess

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

TOKENS = {"read-token-1": "read", "write-token-1": "write", "admin-token-1": "admin"}
AUTH = {scope: {"Authorization": f"Bearer {tok}"} for tok, scope in TOKENS.items()}


@pytest.fixture
def client(tmp_path: Path) -> TestClient:
    """The app in process, over a SQLite metastore."""
    return TestClient(create_app(SqliteMetastore(tmp_path / "c.sqlite"), str(tmp_path), TOKENS))


def _table(client: TestClient, name: str = "t") -> dict[str, Any]:
    body = {"name": name, "id": f"{name}-0123abcd", "created_us": 1, "props": "{}"}
    assert client.post("/v1/tables", json=body, headers=AUTH["write"]).status_code == 201
    return body


def _operations(client: TestClient) -> list[tuple[str, str]]:
    spec = client.get("/openapi.json").json()
    return [(m.upper(), p) for p, ops in spec["paths"].items() for m in ops]


def test_every_endpoint_checks_its_token(client: TestClient) -> None:
    """Derived from the OpenAPI description, so a new endpoint cannot skip auth unnoticed."""
    t = _table(client)
    needed = {"GET": "read", "POST": "write", "DELETE": "admin"}
    exceptions = {("DELETE", "/v1/logs/{table_id}/snapshots"): "write"}  # vacuum forgets old snapshots
    bodies = {
        "/v1/tables": {"name": "u", "id": "u-1", "created_us": 1, "props": "{}"},
        "/v1/logs/{table_id}": {"expected_seq": 0, "entry": "{}"},
        "/v1/logs/{table_id}/snapshots": {"seq": 1, "path": f"{t['id']}/meta/1.json"},
    }
    ops = _operations(client)
    assert len(ops) == 14
    for method, template in ops:
        path = template.replace("{name}", "t").replace("{table_id}", t["id"])
        params = {"time_us": 1} if path.endswith("/at") else {"before": 1} if method == "DELETE" else {}
        kwargs: dict[str, Any] = {"params": params}
        if template in bodies and method == "POST":
            kwargs["json"] = bodies[template]
        for headers in ({}, {"Authorization": "Bearer not-a-token"}, {"Authorization": "Basic eDp5"}):
            r = client.request(method, path, headers=headers, **kwargs)
            assert r.status_code == 401, (method, template, r.text)
            assert r.json()["error"] == "unauthorized"
        scopes = ["read", "write", "admin"]
        for scope in scopes[: scopes.index(exceptions.get((method, template), needed[method]))]:
            r = client.request(method, path, headers=AUTH[scope], **kwargs)
            assert r.status_code == 403, (method, template, scope)
    assert client.get("/v1/tables", headers=AUTH["read"]).json()["tables"] == [t]  # nothing changed


def test_bad_requests_are_json_4xx(client: TestClient) -> None:
    t = _table(client)
    admin = AUTH["admin"]
    cases = [
        ("POST", "/v1/tables", {"content": b"{not json", "headers": {"content-type": "application/json"}}, 422),
        ("POST", "/v1/tables", {"json": {"name": "../etc", "id": "x", "created_us": 1, "props": ""}}, 422),
        ("POST", "/v1/tables", {"json": {"name": "ok", "id": "x", "created_us": "soon", "props": ""}}, 422),
        ("POST", "/v1/tables", {"json": t}, 409),
        ("GET", "/v1/tables/..%2F..%2Fetc", {}, 404),  # no route matches a decoded slash
        ("GET", "/v1/tables/.hidden", {}, 422),
        ("GET", "/v1/tables/missing", {}, 404),
        ("DELETE", "/v1/tables/missing", {}, 404),
        ("GET", "/v1/nowhere", {}, 404),
        ("PUT", "/v1/tables", {}, 405),
        ("POST", f"/v1/logs/{t['id']}", {"json": {"expected_seq": -1, "entry": "{}"}}, 422),
        ("POST", f"/v1/logs/{t['id']}", {"json": {"expected_seq": 3, "entry": "{}"}}, 409),
        ("POST", "/v1/logs/nosuch-id", {"json": {"expected_seq": 0, "entry": "{}"}}, 404),
        ("POST", f"/v1/logs/{t['id']}/snapshots", {"json": {"seq": 1, "path": "other-table/meta/1.json"}}, 400),
        ("POST", f"/v1/logs/{t['id']}/snapshots", {"json": {"seq": 1, "path": f"{t['id']}/../x"}}, 400),
        ("DELETE", f"/v1/logs/{t['id']}/snapshots", {"params": {"before": -1}}, 422),
        ("DELETE", "/v1/logs/nosuch-id/snapshots", {"params": {"before": 1}}, 404),
        ("GET", f"/v1/logs/{t['id']}", {"params": {"after": "x"}}, 422),
        ("GET", f"/v1/logs/{t['id']}", {"params": {"limit": 0}}, 422),
        ("GET", f"/v1/logs/{t['id']}/at", {}, 422),
        ("POST", f"/v1/logs/{t['id']}", {"content": b"x" * (33 * 1024 * 1024)}, 413),
    ]
    for method, path, kwargs, status in cases:
        kwargs.setdefault("headers", {})
        kwargs["headers"] = {**kwargs["headers"], **admin}
        r = client.request(method, path, **kwargs)
        assert r.status_code == status, (method, path, r.status_code, r.text[:300])
        assert "error" in r.json() and "message" in r.json()
    assert client.get(f"/v1/logs/{t['id']}/last", headers=admin).json() == {"seq": 0}  # nothing committed


def test_idempotency_key_applies_an_append_once(client: TestClient) -> None:
    t = _table(client)
    body = {"expected_seq": 0, "entry": '{"a": 1}', "idempotency_key": "k1"}
    first = client.post(f"/v1/logs/{t['id']}", json=body, headers=AUTH["write"])
    again = client.post(f"/v1/logs/{t['id']}", json=body, headers=AUTH["write"])
    assert first.status_code == again.status_code == 200 and first.json() == again.json()
    reused = client.post(f"/v1/logs/{t['id']}", json={**body, "entry": "{}"}, headers=AUTH["write"])
    assert reused.status_code == 400
    assert client.get(f"/v1/logs/{t['id']}/last", headers=AUTH["read"]).json() == {"seq": 1}


def test_client_errors_are_typed(client: TestClient) -> None:
    ms = HttpMetastore("http://testserver", token="read-token-1", client=client)
    assert ms.scope == "read"
    with pytest.raises(AuthorizationError, match="scope 'write'"):
        ms.append("t-0123abcd", 0, "{}")
    with pytest.raises(InvalidNameError):
        ms.get_table("../x")
    with pytest.raises(AuthorizationError, match="unknown token"):
        HttpMetastore("http://testserver", token="wrong-token", client=client)


def test_parse_tokens() -> None:
    assert parse_tokens("abcdefgh=read, ijklmnop=admin") == {"abcdefgh": "read", "ijklmnop": "admin"}
    for bad in ("abcdefgh", "abcdefgh=root", "short=read"):
        with pytest.raises(ConchError):
            parse_tokens(bad)


# --- fuzzing from the OpenAPI description ----------------------------------------------------


@pytest.fixture(scope="module")
def api_schema(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("fuzz")
    ms = SqliteMetastore(root / "c.sqlite")
    app = create_app(ms, str(root), TOKENS)
    TestClient(app).post(
        "/v1/tables", json={"name": "t", "id": "t-1", "created_us": 1, "props": "{}"}, headers=AUTH["admin"]
    )
    return schemathesis.openapi.from_asgi("/openapi.json", app)


@pytest.mark.parametrize("mode", ["POSITIVE", "NEGATIVE"])
def test_fuzz_no_server_errors(api_schema: Any, mode: str) -> None:
    """Requests generated from the server's own OpenAPI description, valid (POSITIVE) and
    invalid (NEGATIVE), with an admin token: never a 5xx, and every answer conforms to the
    documented status codes and response schemas. Bounded: 25 examples per operation and mode."""
    from hypothesis import HealthCheck, given
    from schemathesis.checks import not_a_server_error
    from schemathesis.generation import GenerationMode
    from schemathesis.specs.openapi.checks import response_schema_conformance, status_code_conformance

    checks = [not_a_server_error, status_code_conformance, response_schema_conformance]
    operations = [r.ok() for r in api_schema.get_all_operations()]
    assert len(operations) == 14
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=GenerationMode[mode]))
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        def run(case: Any) -> None:
            case.call_and_validate(headers=AUTH["admin"], checks=checks)

        run()


# --- a real server process: writers, kills and restarts --------------------------------------


def _writer(url: str, token: str, w: int, commits: int, done: Any, first_kill: Any) -> None:
    # A restart can take longer than the client's default 30 s of retries on a loaded machine;
    # the test is about what lands, not about how long the server stays down.
    ms = HttpMetastore(url, token, retry_seconds=600)
    t = conch.connect(ms.warehouse, metastore=ms).table("t")
    for i in range(commits):
        t.write([{"id": w * 1000 + i, "w": w}])
        done.put((w, i))
        if i == 0:  # the rest commit across at least one kill, however fast the machine is
            first_kill.wait(timeout=120)


def test_server_killed_mid_commit_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    """Writer processes commit through a server that is SIGKILLed and restarted on the same port
    several times: every commit that returned is in the log exactly once, and nothing else is."""
    server = ServerProcess(str(tmp_path / "wh"), {"admin-token-1": "admin"}).start()
    try:
        conch.connect(server.url, token="admin-token-1").create_table(
            "t", [("id", pa.int64())], pa.schema([("w", pa.int64())])
        )
        ctx = multiprocessing.get_context("spawn")
        done = ctx.Queue()
        first_kill = ctx.Event()
        n, m = 3, 6
        procs = [
            ctx.Process(target=_writer, args=(server.url, "admin-token-1", w, m, done, first_kill)) for w in range(n)
        ]
        for p in procs:
            p.start()
        stop = threading.Event()
        kills: list[int] = []

        def chaos() -> None:  # from the first commit until the writers are done: kill, restart
            rng = random.Random(7)
            while done.empty() and not stop.wait(0.05):
                pass
            first = True
            while first or not stop.wait(rng.uniform(0.2, 1.0)):
                kills.append(done.qsize())
                server.kill()
                if first:
                    first_kill.set()
                    first = False
                time.sleep(rng.uniform(0.0, 0.3))
                server.start()

        killer = threading.Thread(target=chaos)
        killer.start()
        for p in procs:
            p.join(300)
        stop.set()
        killer.join()
        assert [p.exitcode for p in procs] == [0] * n
        assert any(0 < k < n * m for k in kills)  # killed while commits were under way
        returned = set()
        while not done.empty():
            returned.add(done.get())
        assert len(returned) == n * m
        t = conch.connect(server.url, token="admin-token-1").table("t")
        history = t.history()
        # no write applied twice, none lost (automatic compactions run between them)
        assert [c.kind for c in history].count("write") == n * m
        ids = t.scan().to_arrow().column("id").to_pylist()
        assert sorted(ids) == sorted(w * 1000 + i for w, i in returned)
    finally:
        server.stop()


def test_log_pages(tmp_path: Path) -> None:
    """Reads longer than one page come back whole and in order."""
    app = create_app(SqliteMetastore(tmp_path / "c.sqlite"), str(tmp_path), TOKENS)
    ms = HttpMetastore("http://testserver", token="admin-token-1", client=TestClient(app))
    cat = conch.connect(tmp_path, metastore=ms)
    rec = cat.create_table("t", [("id", pa.int64())])
    for i in range(1005):
        ms.append(rec.id, i, json.dumps({"kind": "noop", "i": i}))
    log = ms.read_log(rec.id)
    assert [e.seq for e in log] == list(range(1, 1006))
    assert [e.seq for e in ms.read_log(rec.id, 990, 1003)] == list(range(991, 1004))
