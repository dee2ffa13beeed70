"""Real services the backend tests need, started and stopped by fixtures (loopback only):

- `moto_s3`: moto's threaded S3 server on a free port of 127.0.0.1 (it honours `If-None-Match`
  and `If-Match`, answering 412, which commits on object storage rely on);
- `postgres`: a private PostgreSQL 15 cluster (`initdb` + `pg_ctl`) on a free port, with its
  socket directory under a temporary directory, run as the `postgres` user when tests run as root;
- `azurite`: Microsoft's Azure Blob emulator (`.ci/install-azurite.sh`) on a free port, with one
  container (put-if-absent is real there too);
- `conch_server`: `conch serve` in a subprocess (see `ServerProcess`).

Registered as a pytest plugin by `conftest.py`; fixtures are session-scoped (one per xdist
worker) and fail the test when the set-up did not install the service's software.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conch.apps.pipelines.local_s3 import LocalS3, s3_server


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s")


# --- S3 (moto) ---------------------------------------------------------------------------


@dataclass(frozen=True)
class MotoS3(LocalS3):
    """A running moto S3 server (`conch.apps.pipelines.local_s3.s3_server`) and one bucket on it."""

    def uri(self, prefix: str | None = None) -> str:
        """A fresh warehouse URI in the bucket (a new random prefix unless one is given)."""
        return f"s3://{self.bucket}/{prefix or uuid.uuid4().hex[:12]}"


@contextlib.contextmanager
def moto_server() -> Iterator[MotoS3]:
    """A moto S3 server on a free loopback port with one bucket, stopped on exit."""
    with s3_server("conch-tests", key="testing") as s3:
        yield MotoS3(s3.endpoint, s3.bucket, s3.key)


@pytest.fixture(scope="session")
def moto_s3() -> Iterator[MotoS3]:
    with moto_server() as s3:
        yield s3


# --- Azure Blob (Azurite) -----------------------------------------------------------------

AZURITE = Path(__file__).resolve().parent.parent / ".ci" / "node" / "node_modules" / ".bin" / "azurite-blob"
# Azurite's fixed development account (public, documented by Microsoft).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


@dataclass
class Azurite:
    """A running Azurite blob service and one container on it."""

    endpoint: str  # http://127.0.0.1:<port>/devstoreaccount1
    container: str = "conch-tests"

    def uri(self, prefix: str | None = None) -> str:
        return f"az://{self.container}/{prefix or uuid.uuid4().hex[:12]}"

    @property
    def options(self) -> dict[str, Any]:
        return {"account_name": AZURITE_ACCOUNT, "access_key": AZURITE_KEY, "endpoint": self.endpoint}


@contextlib.contextmanager
def azurite_server() -> Iterator[Azurite]:
    """Azurite's blob service on a free loopback port with one container, stopped on exit."""
    from azure.storage.blob import BlobServiceClient

    port = free_port()
    root = tempfile.mkdtemp(prefix="conch-azurite-")
    cmd = [str(AZURITE), "--blobHost", "127.0.0.1", "--blobPort", str(port), "--location", root]
    proc = subprocess.Popen([*cmd, "--silent", "--skipApiVersionCheck", "--loose"], stdout=subprocess.DEVNULL)
    try:
        wait_port(port, timeout=120)  # node starts slowly on a loaded machine
        az = Azurite(f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}")
        conn = f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        BlobServiceClient.from_connection_string(conn + f"BlobEndpoint={az.endpoint};").create_container(az.container)
        yield az
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def azurite() -> Iterator[Azurite]:
    if not AZURITE.exists():
        pytest.fail("Azurite is not installed: the set-up installs it (bash .ci/install-azurite.sh)")
    with azurite_server() as az:
        yield az


# --- PostgreSQL --------------------------------------------------------------------------


@dataclass
class Postgres:
    """A private PostgreSQL cluster; `dsn()` creates a fresh database on it."""

    port: int
    socket_dir: str
    bin_dir: str
    user: str
    _n: int = 0
    data: str = ""  # the cluster's data directory and server options: for `crash()` and `restart()`
    opts: str = ""

    @property
    def admin_dsn(self) -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def dsn(self) -> str:
        """A fresh, empty database (one per test, so tests never see each other's tables)."""
        import psycopg

        name = f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.admin_dsn, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{name}"

    def crash(self) -> None:
        """`pg_ctl stop -m immediate`: the server exits at once, without a clean shutdown."""
        subprocess.run(
            _as_db_user([f"{self.bin_dir}/pg_ctl", "-D", self.data, "-m", "immediate", "stop"]),
            check=True,
            capture_output=True,
        )

    def restart(self) -> None:
        """Start the server again on the same port and data (after `crash()`); returns when it
        accepts connections (recovery done)."""
        log = os.path.join(os.path.dirname(self.data), "log")
        cmd = [f"{self.bin_dir}/pg_ctl", "-D", self.data, "-o", self.opts, "-l", log, "-w", "start"]
        subprocess.run(_as_db_user(cmd), check=True, capture_output=True)


def postgres_bin_dir() -> str | None:
    """Where `initdb`/`pg_ctl` are: Debian's versioned directory, else PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return os.path.dirname(initdb) if initdb else None


def _as_db_user(cmd: list[str]) -> list[str]:
    """initdb and postgres refuse to run as root: run them as `postgres` then."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *cmd]
    return cmd


@contextlib.contextmanager
def postgres_server(durable: bool = False) -> Iterator[Postgres]:
    """A private PostgreSQL cluster on a free loopback port, removed on exit. Tests run it with
    `fsync=off` (speed; nothing they check needs a power loss); benchmarks with `durable=True`."""
    bin_dir = postgres_bin_dir()
    if bin_dir is None:
        raise RuntimeError("PostgreSQL is not installed (bash .ci/install-postgres.sh)")
    root = tempfile.mkdtemp(prefix="conch-pg-")
    data, sock = os.path.join(root, "data"), os.path.join(root, "sock")
    os.makedirs(sock)
    user = "postgres" if os.geteuid() == 0 else os.environ.get("USER", "postgres")
    if os.geteuid() == 0:
        shutil.chown(root, "postgres")
        shutil.chown(sock, "postgres")
    port = free_port()
    subprocess.run(
        _as_db_user([f"{bin_dir}/initdb", "-D", data, "-U", user, "--auth=trust", "-E", "UTF8", "--no-sync"]),
        check=True,
        capture_output=True,
    )
    opts = f"-p {port} -k {sock} -c listen_addresses=127.0.0.1 -c max_connections=200"
    if not durable:
        opts += " -c fsync=off"
    subprocess.run(
        _as_db_user([f"{bin_dir}/pg_ctl", "-D", data, "-o", opts, "-l", f"{root}/log", "-w", "start"]),
        check=True,
        capture_output=True,
    )
    try:
        yield Postgres(port, sock, bin_dir, user, data=data, opts=opts)
    finally:
        subprocess.run(_as_db_user([f"{bin_dir}/pg_ctl", "-D", data, "-m", "immediate", "stop"]), capture_output=True)
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    if postgres_bin_dir() is None:
        pytest.fail("PostgreSQL is not installed: the set-up installs it (bash .ci/install-postgres.sh)")
    with postgres_server() as pg:
        yield pg


# --- conch serve -------------------------------------------------------------------------


class ServerProcess:
    """`conch serve` in a subprocess on a loopback port; `kill()` and `start()` again on the
    same port simulate a crash and a restart."""

    def __init__(self, warehouse: str, tokens: dict[str, str], env: dict[str, str] | None = None, **extra: str):
        self.warehouse = warehouse
        self.port = free_port()
        self.tokens = tokens
        self.env = {**os.environ, **(env or {})}
        self.extra = extra
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="conch-serve-", suffix=".log", delete=False)  # noqa: SIM115

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ServerProcess:
        tokens = ",".join(f"{tok}={scope}" for tok, scope in self.tokens.items())
        cmd = [sys.executable, "-m", "conch.apps.cli", "--warehouse", self.warehouse, "serve", "--host", "127.0.0.1"]
        cmd += ["--port", str(self.port), "--tokens", tokens]
        for k, v in self.extra.items():
            cmd += [f"--{k.replace('_', '-')}", v]
        self.proc = subprocess.Popen(cmd, env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            wait_port(self.port, timeout=120)  # Python + FastAPI start slowly on a loaded machine
        except TimeoutError:
            self.kill()
            raise RuntimeError(f"conch serve did not start: {Path(self.log.name).read_text()[-2000:]}") from None
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(10)
        self.kill()
        with contextlib.suppress(OSError):
            os.unlink(self.log.name)
