"""Shared fixtures for the engine tests: a private model cache and a tiny untrained model."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session", autouse=True)
def _private_model_cache(private_model_cache):
    """Every test here builds models into a per-session cache (tests/conftest.py), never ~/.cache."""
    return private_model_cache


@pytest.fixture(scope="session")
def text2sql_data(tmp_path_factory) -> dict[str, str]:
    """SQLite databases in Spider's layout and a Parquet dataset in SkyRL's text2sql format."""
    from skyrl_engine.tasks import write_rows
    from skyrl_engine.text2sql_data import make_databases, text2sql_rows

    root = tmp_path_factory.mktemp("text2sql")
    db_root = make_databases(str(root / "sql_data"))
    train = write_rows(str(root / "train.parquet"), text2sql_rows("train", db_root)[:24])
    test = write_rows(str(root / "test.parquet"), text2sql_rows("test", db_root)[:8])
    return {"db_path": db_root, "train": train, "test": test}


SEARCH_CORPUS = [
    "Paris is the capital of France.",
    "Berlin is the capital of Germany.",
    "Rome is the capital of Italy.",
    "The Nile is the longest river in Africa.",
    "Mount Everest is the highest mountain on Earth.",
    "Tokyo is the capital of Japan.",
]


@pytest.fixture()
def retriever():
    """A BM25 retriever on loopback for one test; it would stop by itself after 10 idle minutes anyway."""
    from skyrl_engine.retriever import RetrieverServer

    with RetrieverServer(SEARCH_CORPUS, idle_timeout=600, max_lifetime=1800) as server:
        yield server
