"""The loopback BM25 retriever speaks Search-R1's API and stops by itself."""

from __future__ import annotations

import time

import requests

from skyrl_engine.retriever import BM25, RetrieverServer


def test_bm25_ranks_the_matching_document_first():
    index = BM25(["the cat sat", "dogs bark loudly", "a cat and a dog"])
    assert index.search("cat", 2)[0][0] in (0, 2) and index.search("bark", 1) == [(1, index.search("bark", 1)[0][1])]
    assert index.search("zebra", 1)[0][1] == 0.0


def test_http_api_matches_skyrl_gym_search_tool(retriever):
    from skyrl_gym.tools.search import SearchToolGroup

    body = requests.post(retriever.url, json={"query": "capital of France", "topk": 2, "return_scores": True}, timeout=5).json()
    assert body["result"][0][0]["document"]["contents"] == "Paris is the capital of France."
    assert len(body["result"][0]) == 2 and "score" in body["result"][0][0]
    text = SearchToolGroup(search_url=retriever.url, topk=1, log_requests=False).search("highest mountain")
    assert "Everest" in text
    assert requests.post(retriever.url.replace("/retrieve", "/nope"), json={}, timeout=5).status_code == 404


def test_server_stops_by_itself_when_idle():
    server = RetrieverServer(["x"], idle_timeout=0.5, max_lifetime=30)
    deadline = time.monotonic() + 10
    while server.running and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not server.running and "running=False" in repr(server)
