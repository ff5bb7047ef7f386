"""Fixtures for the evaluation tests: a real local Ray head (token auth on) for this folder's job tests, and the
model cache their jobs build the built-in tiny model in.

The head is module-scoped, so it is gone before any other folder's session cluster starts (one local head at a
time, ~7 s to start here). Its jobs run the real engine (``python -m skyrl_engine``)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="module")
def eval_cluster() -> Any:
    """A local Ray head with 2 CPUs in a short private temp dir, running the real engine; shut down after the module."""
    from skyrl_nb.cluster.local import local

    home = Path(tempfile.mkdtemp(prefix="snb-ev-", dir="/tmp"))
    cluster = local(num_cpus=2, temp_dir=home / "ray", token_path=home / "config" / "ray_token", progress=False)
    cluster.engine_module = "skyrl_engine"
    try:
        yield cluster
    finally:
        cluster.shutdown()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def job_model_cache() -> dict[str, Any]:
    """A runtime env that points the jobs' model cache at this machine's (as the browser tests do): the built-in
    tiny model is warm-started there once (~60 s on 2 busy cores) and loaded in a second by later runs."""
    cache = os.environ.get("SKYRL_NB_CACHE") or str(Path.home() / ".cache" / "skyrl-nb")
    return {"env_vars": {"SKYRL_NB_CACHE": cache}}
