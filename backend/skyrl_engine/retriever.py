"""A small BM25 retriever with Search-R1's HTTP API, for skyrl-gym's ``search`` environment.

``POST /retrieve`` with ``{"query": str | [str], "topk": int, "return_scores": bool}`` answers
``{"result": [[{"document": {"id", "contents"}, "score"}, ...]]}`` (one list per query), which is
what ``skyrl_gym.tools.search`` reads. Loopback only; the server stops by itself after
``idle_timeout`` seconds without a request or ``max_lifetime`` seconds in all, so a test or a run
that forgets it leaves nothing behind.

>>> with RetrieverServer(["Paris is the capital of France."]) as server:  # doctest: +SKIP
...     server.url   # 'http://127.0.0.1:<port>/retrieve'

``python -m skyrl_engine.retriever --corpus docs.jsonl --port 8000`` serves a JSONL corpus (one
``{"contents": ...}`` per line).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_TOKEN = re.compile(r"[a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric words."""
    return _TOKEN.findall(text.lower())


class BM25:
    """Okapi BM25 over a list of documents (``k1=1.5, b=0.75``)."""

    def __init__(self, docs: list[str], k1: float = 1.5, b: float = 0.75):
        self.docs = list(docs)
        self.k1, self.b = k1, b
        self.tfs = [Counter(tokenize(d)) for d in self.docs]
        self.lengths = [sum(tf.values()) for tf in self.tfs]
        self.avg_len = sum(self.lengths) / max(1, len(self.lengths))
        df = Counter(term for tf in self.tfs for term in tf)
        n = len(self.docs)
        self.idf = {term: math.log(1 + (n - f + 0.5) / (f + 0.5)) for term, f in df.items()}

    def search(self, query: str, topk: int = 3) -> list[tuple[int, float]]:
        """``(doc_index, score)`` of the best ``topk`` documents, best first (ties by index)."""
        terms = tokenize(query)
        scores = []
        for i, tf in enumerate(self.tfs):
            s = 0.0
            for term in terms:
                if term in tf:
                    f = tf[term]
                    s += self.idf[term] * f * (self.k1 + 1) / (f + self.k1 * (1 - self.b + self.b * self.lengths[i] / self.avg_len))
            scores.append((i, s))
        scores.sort(key=lambda p: (-p[1], p[0]))
        return scores[: max(0, topk)]


def send_json(handler: BaseHTTPRequestHandler, code: int, payload: Any) -> None:
    """Answer an ``http.server`` request with ``payload`` as JSON (status ``code``, a Content-Length)."""
    data = json.dumps(payload).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class RetrieverServer:
    """BM25 over ``docs`` behind ``POST /retrieve`` on 127.0.0.1, in a background thread.

    Stops on :meth:`close`, on leaving a ``with`` block, after ``idle_timeout`` seconds without a
    request, or ``max_lifetime`` seconds after start, whichever comes first.
    """

    def __init__(self, docs: list[str], port: int = 0, idle_timeout: float = 120.0, max_lifetime: float = 900.0):
        self.index = BM25(docs)
        self.idle_timeout, self.max_lifetime = idle_timeout, max_lifetime
        self.requests = 0
        self._last = self._started = time.monotonic()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                server._last = time.monotonic()
                server.requests += 1
                if self.path.rstrip("/") != "/retrieve":
                    self._reply(404, {"error": f"unknown path {self.path}; use /retrieve"})
                    return
                try:
                    body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                    self._reply(200, server.answer(body))
                except (ValueError, TypeError) as err:
                    self._reply(400, {"error": str(err)})

            def _reply(self, code: int, payload: dict[str, Any]) -> None:
                send_json(self, code, payload)

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="bm25-retriever", daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name="bm25-retriever-watchdog", daemon=True)
        self._closed = threading.Event()
        self._thread.start()
        self._watchdog.start()

    @property
    def url(self) -> str:
        """The ``search_url`` for skyrl-gym's search env."""
        return f"http://127.0.0.1:{self.port}/retrieve"

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The response body for one request body."""
        queries = body.get("query")
        queries = [queries] if isinstance(queries, str) else list(queries or [])
        topk = int(body.get("topk", 3))
        result = []
        for q in queries:
            hits = []
            for i, score in self.index.search(str(q), topk):
                item: dict[str, Any] = {"document": {"id": str(i), "contents": self.index.docs[i]}}
                if body.get("return_scores", True):
                    item["score"] = score
                hits.append(item)
            result.append(hits)
        return {"result": result}

    def _watch(self) -> None:
        while not self._closed.wait(0.5):
            now = time.monotonic()
            if now - self._last > self.idle_timeout or now - self._started > self.max_lifetime:
                self.close()

    @property
    def running(self) -> bool:
        """False once the server has stopped."""
        return not self._closed.is_set()

    def close(self) -> None:
        """Stop serving and free the port (idempotent)."""
        if self._closed.is_set():
            return
        self._closed.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> RetrieverServer:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RetrieverServer(url={self.url!r}, docs={len(self.index.docs)}, running={self.running})"

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


def main(argv: list[str] | None = None) -> int:
    """Serve a JSONL corpus until idle (see the module docstring)."""
    parser = argparse.ArgumentParser(prog="python -m skyrl_engine.retriever")
    parser.add_argument("--corpus", required=True, help="JSONL, one {\"contents\": ...} per line")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--idle-timeout", type=float, default=600.0)
    parser.add_argument("--max-lifetime", type=float, default=6 * 3600.0)
    args = parser.parse_args(argv)
    with open(args.corpus, encoding="utf-8") as f:
        docs = [json.loads(line)["contents"] for line in f if line.strip()]
    server = RetrieverServer(docs, args.port, args.idle_timeout, args.max_lifetime)
    print(f"serving {len(docs)} documents at {server.url}", flush=True)
    while server.running:
        time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
