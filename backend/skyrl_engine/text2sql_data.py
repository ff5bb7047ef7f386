"""A tiny text2sql task in SkyRL's format, on SQLite databases in Spider's layout.

``make_databases(root)`` writes ``<root>/spider/database/<db_id>/<db_id>.sqlite`` (where skyrl-gym's
``text2sql`` env looks with ``db_path=root`` and ``data="spider"``); ``text2sql_rows(split)`` gives
dataset rows as SkyRL's text2sql Parquet has them::

    {"data_source": "spider", "prompt": [{"role": "user", "content": "..."}], "env_class": "text2sql",
     "reward_spec": {"method": "rule", "ground_truth": "SELECT ..."}, "db_id": "concert", "data": "spider",
     "extra_info": {"split": "train", "index": 0, "warm_start_answer": "<think>..</think><solution>..</solution>"}}

Prompts are short (the built-in model reads characters). ``extra_info.warm_start_answer`` is the
answer in the env's format, which the built-in model's supervised warm start learns; half of them
query the database first (``<sql>``), so rollouts take more than one turn.

``builtin://text2sql/{train,test}`` is this task, its databases in ``<cache>/text2sql``.
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from skyrl_engine.cache import cache_root

SPLITS = {"train": 96, "test": 16}
_SINGERS = [("Ann", 31, "UK"), ("Bo", 25, "US"), ("Cy", 42, "UK"), ("Di", 19, "FR"), ("Ed", 37, "US")]
_PETS = [("cat", 3, 4.0), ("dog", 5, 12.5), ("cat", 1, 3.2), ("fish", 2, 0.1), ("dog", 8, 20.0), ("cat", 7, 5.1)]


def builtin_db_root() -> str:
    """Where the built-in task's databases live: ``<SKYRL_NB_CACHE or ~/.cache/skyrl-nb>/text2sql``."""

    return os.path.join(cache_root(), "text2sql")


def make_databases(root: str) -> str:
    """Write the task's SQLite files under ``root`` in Spider's layout (idempotent); return ``root``."""
    tables = {
        "concert": ("CREATE TABLE singer (name TEXT, age INT, country TEXT)", "INSERT INTO singer VALUES (?,?,?)", _SINGERS),
        "pets": ("CREATE TABLE pet (kind TEXT, age INT, weight REAL)", "INSERT INTO pet VALUES (?,?,?)", _PETS),
    }
    for db_id, (create, insert, values) in tables.items():
        folder = os.path.join(root, "spider", "database", db_id)
        path = os.path.join(folder, f"{db_id}.sqlite")
        if os.path.exists(path):
            continue
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.tmp"
        with sqlite3.connect(tmp) as conn:
            conn.execute(create)
            conn.executemany(insert, values)
        conn.close()
        os.replace(tmp, path)
    return root


def _questions() -> list[tuple[str, str, str, str]]:
    """``(db_id, schema, question, gold_sql)`` templates."""
    out = []
    for country in ("UK", "US", "FR"):
        out.append(("concert", "singer(name,age,country)", f"how many singers from {country}?",
                    f"SELECT count(*) FROM singer WHERE country='{country}'"))
    for age in (20, 30, 40):
        out.append(("concert", "singer(name,age,country)", f"names of singers older than {age}?",
                    f"SELECT name FROM singer WHERE age>{age}"))
    out.append(("concert", "singer(name,age,country)", "oldest singer age?", "SELECT max(age) FROM singer"))
    for kind in ("cat", "dog", "fish"):
        out.append(("pets", "pet(kind,age,weight)", f"how many {kind}s?", f"SELECT count(*) FROM pet WHERE kind='{kind}'"))
        out.append(("pets", "pet(kind,age,weight)", f"max weight of {kind}s?", f"SELECT max(weight) FROM pet WHERE kind='{kind}'"))
    return out


def text2sql_rows(split: str, db_root: str | None = None) -> list[dict[str, Any]]:
    """The task's rows for ``split`` (deterministic); builds the databases under ``db_root`` (default: the cache)."""
    if split not in SPLITS:
        raise ValueError(f"builtin://text2sql/{split}: unknown split; allowed: {', '.join(SPLITS)}")
    make_databases(db_root or builtin_db_root())
    templates = _questions()
    rows = []
    offset = 0 if split == "train" else 1
    for i in range(SPLITS[split]):
        db_id, schema, question, sql = templates[(i + offset) % len(templates)]
        first_query = (i // len(templates)) % 2 == 1
        answer = f"<think>{'look' if first_query else 'ok'}</think>" + (
            f"<sql>{sql}</sql>" if first_query else f"<solution>{sql}</solution>")
        rows.append({
            "data_source": "spider",
            "prompt": [{"role": "user", "content": f"{schema} {question}"}],
            "env_class": "text2sql",
            "reward_spec": {"method": "rule", "ground_truth": sql},
            "db_id": db_id,
            "data": "spider",
            "extra_info": {"split": split, "index": i, "warm_start_answer": answer},
        })
    return rows
