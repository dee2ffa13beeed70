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
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from conch._deps import optional_import

BUCKET = "conch-demo"


@dataclass(frozen=True)
class LocalS3:
    """A running server with one empty bucket."""

    endpoint: str
    bucket: str

    def uri(self, prefix: str) -> str:
        """`s3://<bucket>/<prefix>`: a warehouse URI on this server."""
        return f"s3://{self.bucket}/{prefix.strip('/')}"

    @property
    def env(self) -> dict[str, str]:
        """The environment variables that point S3 clients (obstore, Spark workers) here."""
        return {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "conch-demo",
            "AWS_SECRET_ACCESS_KEY": "conch-demo",
            "AWS_REGION": "us-east-1",
            "AWS_ALLOW_HTTP": "true",
        }


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def local_s3(bucket: str = BUCKET) -> Iterator[LocalS3]:
    """Start moto on a free port of 127.0.0.1, create `bucket`, point the environment at it;
    stop the server and restore the environment on exit."""
    server_mod = optional_import("moto.server")
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request otherwise
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    s3 = LocalS3(f"http://127.0.0.1:{port}", bucket)
    saved = {k: os.environ.get(k) for k in s3.env}
    try:
        # moto does not check signatures: a plain PUT creates the bucket (no boto3 needed).
        urllib.request.urlopen(urllib.request.Request(f"{s3.endpoint}/{bucket}", method="PUT"), timeout=30).close()
        os.environ.update(s3.env)
        yield s3
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
