"""``skyrl_engine.serve_auth``: the served model's key checked against its hash, as vLLM's server runs it (a pure ASGI
middleware around a stand-in app). The whole path (the notebook sends the hash, vLLM's server refuses without the key)
runs in tests/vllm/test_serve.py."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from skyrl_engine import serve_auth


async def _app(scope, receive, send):
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"ok"})


def _status(path: str, headers: dict[str, str], method: str = "GET") -> int:
    sent: list[dict] = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "root_path": "",
             "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()]}
    # its own thread: an earlier test of the session may leave an event loop running in this one
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, serve_auth.KeyHashMiddleware(_app)(scope, receive, send)).result()
    return next(m["status"] for m in sent if m["type"] == "http.response.start")


def test_only_the_keys_hash_is_needed_to_check_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(serve_auth.KEY_HASH_ENV, serve_auth.key_hash("s3cret-key"))
    assert _status("/v1/models", {"Authorization": "Bearer s3cret-key"}) == 200
    assert _status("/v1/completions", {"authorization": "bearer s3cret-key"}) == 200
    assert _status("/v1/models", {}) == 401
    assert _status("/v1/models", {"Authorization": "Bearer s3cret-kez"}) == 401
    assert _status("/v1/models", {"Authorization": "Basic s3cret-key"}) == 401
    assert _status("/health", {}) == 200 and _status("/v1/models", {}, method="OPTIONS") == 200  # as vLLM's check
