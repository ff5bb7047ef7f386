"""The served model's API key, checked inside vLLM's server against its SHA-256 only.

A job's ``runtime_env`` is public on the cluster (Ray's dashboard and job API list its ``env_vars``), so
``skyrl_nb.serve`` never puts the key there: it sends ``SKYRL_SERVE_KEY_SHA256``, the hex SHA-256 of the key, and
``skyrl_engine.serve`` installs :class:`KeyHashMiddleware` in vLLM's server (``--middleware``). A request to the
guarded paths (vLLM's own: ``/v1``, ``/v2``, ``/inference``, ``/cohere``) passes when the SHA-256 of its bearer token
equals that hash, as vLLM's ``--api-key`` check compares hashes; ``/health`` and ``OPTIONS`` stay open, as there.

vLLM's Python imports it from this node's copy of the engine code (``vllm_engine.engine_pythonpath``, as the
engines' ``vllm_metrics``); that Python may not have skyrl-nb installed, so it imports nothing of ours (starlette
comes with vLLM).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any

KEY_HASH_ENV = "SKYRL_SERVE_KEY_SHA256"
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


def key_hash(key: str) -> str:
    """The hex SHA-256 the server compares a bearer token's against."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


class KeyHashMiddleware:
    """Pure ASGI middleware: 401 on a guarded path unless the bearer token's SHA-256 is ``$SKYRL_SERVE_KEY_SHA256``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.expected = bytes.fromhex(os.environ[KEY_HASH_ENV])

    def allowed(self, headers: list[tuple[bytes, bytes]]) -> bool:
        value = next((v.decode("latin-1") for k, v in headers if k.lower() == b"authorization"), "")
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer":
            return False
        return hmac.compare_digest(hashlib.sha256(token.encode("utf-8")).digest(), self.expected)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope.get("method") != "OPTIONS":
            path = scope["path"].removeprefix(scope.get("root_path", ""))
            if path.startswith(GUARDED_PREFIXES) and not self.allowed(scope.get("headers", [])):
                from starlette.responses import JSONResponse

                await JSONResponse(content={"error": "Unauthorized"}, status_code=401)(scope, receive, send)
                return
        await self.app(scope, receive, send)
