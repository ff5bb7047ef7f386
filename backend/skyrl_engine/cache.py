"""The engine's cache on disk (built models, converted GGUF checkpoints, downloaded wheels, text2sql
databases, SkyRL-layout data) and the file lock that lets several processes build into it safely."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator


def cache_root() -> str:
    """Where built models live: ``$SKYRL_NB_CACHE`` or ``~/.cache/skyrl-nb``."""
    return os.environ.get("SKYRL_NB_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "skyrl-nb")


@contextlib.contextmanager
def file_lock(path: str) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created with its folder): one builder at a time, across processes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
