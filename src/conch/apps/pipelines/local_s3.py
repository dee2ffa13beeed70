"""A throwaway S3-compatible server on loopback for `conch demo --s3`: moto's threaded server.

moto honours `If-None-Match` / `If-Match` (answering 412), which the object-store metastore's
put-if-absent commits rely on, so the demo runs on `s3://` with no service beyond this one and
exercises the same commit path as a real bucket. It keeps every object in memory: a demo and test
tool, never storage.

Clients reach it through the usual environment variables (`AWS_ENDPOINT_URL`, credentials,
`AWS_ALLOW_HTTP`). They are set for the life of the context, before the demo starts Spark, so the
Spark executors' Python workers (children of the JVM, which inherits this process's environment)
reach the same server without any option: exactly how a real deployment passes S3 credentials.

>>> with local_s3() as s3:  # doctest: +SKIP
...     conch.connect(s3.uri("demo")).create_table(...)
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import wraps
from typing import Any

from conch.model.deps import optional_import

BUCKET = "conch-demo"


@dataclass(frozen=True)
class LocalS3:
    """A running server with one empty bucket."""

    endpoint: str
    bucket: str
    key: str = "conch-demo"  # access key id and secret (moto checks neither)

    def uri(self, prefix: str) -> str:
        """`s3://<bucket>/<prefix>`: a warehouse URI on this server."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point S3 clients (obstore, Spark workers) here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": self.key,
            "AWS_SECRET_ACCESS_KEY": self.key,
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }

    @property
    def options(self) -> dict[str, object]:
        """The same as `storage_options=` of `conch.connect`, for clients that take no environment."""
        return {
            "endpoint": self.endpoint,
            "access_key_id": self.key,
            "secret_access_key": self.key,
            "region": "us-east-1",
            "allow_http": True,
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def atomic_conditional_puts() -> None:
    """Make moto's PutObject atomic, as S3's is. moto 5.2.5 checks `If-None-Match: *` and then
    stores the object without a lock (`S3Response.put_object`), so two racing conditional puts
    of one key can both succeed: under load the object-store WAL's concurrency tests then saw
    a commit overwritten. One lock around the handler closes that window; nothing else changes.
    """
    S3Response = optional_import("moto.s3.responses").S3Response

    put = S3Response.put_object
    if getattr(put, "conch_atomic", False):
        return
    lock = threading.Lock()

    @wraps(put)
    def atomic_put(self: Any) -> Any:
        with lock:
            return put(self)

    atomic_put.conch_atomic = True  # type: ignore[attr-defined]
    S3Response.put_object = atomic_put


@contextmanager
def s3_server(bucket: str = BUCKET, key: str = "conch-demo") -> Iterator[LocalS3]:
    """Start moto on a free port of 127.0.0.1 with one empty `bucket`; stop it on exit. The
    environment is left alone (`local_s3` points it here)."""
    server_mod = optional_import("moto.server")
    atomic_conditional_puts()
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        s3 = LocalS3(f"http://127.0.0.1:{port}", bucket, key)
        # moto does not check signatures: a plain PUT creates the bucket (no boto3 needed).
        urllib.request.urlopen(urllib.request.Request(f"{s3.endpoint}/{bucket}", method="PUT"), timeout=30).close()
        yield s3
    finally:
        server.stop()


@contextmanager
def local_s3(bucket: str = BUCKET) -> Iterator[LocalS3]:
    """`s3_server`, with the environment pointed at it for the life of the context (restored on
    exit)."""
    with s3_server(bucket) as s3:
        saved = {k: os.environ.get(k) for k in s3.env}
        try:
            os.environ.update(s3.env)
            yield s3
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
