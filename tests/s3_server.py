"""A local S3 API for tests and benches: moto in server mode on 127.0.0.1, counting the requests it serves.

``moto_s3()`` starts ``python tests/s3_server.py`` in its own process group (a server in the test's
own process would share its GIL with the readers it measures), waits until it answers, makes a bucket,
and yields a :class:`S3Server`. ``GET /__requests__`` on it answers ``{"GET": n, "PUT": n, ...}``
(requests served so far, by method; that path itself is not counted). The server is stopped on exit.

Credentials are dummies; ``server.env`` holds the variables any process (a notebook, a Ray job) needs
to reach it through boto3 / s3fs: ``AWS_ENDPOINT_URL_S3`` and a key pair.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

COUNT_PATH = "/__requests__"


@dataclass
class S3Server:
    """A running local S3 server: its endpoint, a bucket made for the test, and the environment to reach it."""

    endpoint: str
    bucket: str
    env: dict[str, str] = field(default_factory=dict)

    def requests(self) -> dict[str, int]:
        """Requests served so far, by HTTP method."""
        with urllib.request.urlopen(self.endpoint + COUNT_PATH, timeout=10) as resp:
            return json.loads(resp.read())

    def total(self) -> int:
        return sum(self.requests().values())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def s3_env(endpoint: str) -> dict[str, str]:
    """What boto3 and s3fs read to talk to the local server (dummy keys: moto accepts any)."""
    return {"AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}


@contextmanager
def moto_s3(bucket: str = "skyrl-test", timeout_s: float = 60.0) -> Iterator[S3Server]:
    """Start the server and create ``bucket``; stop the server after. This process's environment is left alone."""
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}"
    log = open(Path(os.environ.get("TMPDIR", "/tmp")) / f"moto-s3-{port}.log", "wb")
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                urllib.request.urlopen(endpoint + COUNT_PATH, timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the moto S3 server did not start (exit {proc.poll()}); log: {log.name}") from None
                time.sleep(0.2)
        import boto3

        env = s3_env(endpoint)
        boto3.client("s3", endpoint_url=endpoint, aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                     aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
                     region_name=env["AWS_DEFAULT_REGION"]).create_bucket(Bucket=bucket)
        yield S3Server(endpoint, bucket, env)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        Path(log.name).unlink(missing_ok=True)


def _serve(port: int) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    moto_app = DomainDispatcherApplication(create_backend_app)
    counts: dict[str, int] = {}

    def app(environ, start_response):
        if environ.get("PATH_INFO") == COUNT_PATH:
            body = json.dumps(counts).encode()
            start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(body)))])
            return [body]
        method = environ.get("REQUEST_METHOD", "?")
        counts[method] = counts.get(method, 0) + 1
        return moto_app(environ, start_response)

    server = make_server("127.0.0.1", port, app, threaded=True, request_handler=MotoRequestHandler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    _serve(parser.parse_args().port)
