"""Fixtures for the notebook-side tests: one real local Ray cluster per session, a spy cluster.

The session cluster is a real `ray start --head` with token auth, in a short private temp dir
(Unix socket paths must stay under 107 bytes). Its jobs run `fake_engine` (this folder), which
writes a run store like the engine does, so these tests need no model training.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


@pytest.fixture(scope="session")
def nb_home() -> Any:
    """Short private cache/config dirs for skyrl-nb (the token file and the Ray temp dir live here)."""
    root = Path(tempfile.mkdtemp(prefix="snb-", dir="/tmp"))
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def ray_cluster(nb_home: Path) -> Any:
    """A real local Ray head (token auth on) whose jobs can import `fake_engine`."""
    from skyrl_nb.cluster.local import local

    old = os.environ.get("PYTHONPATH")
    # The head's processes (and so every job's driver) inherit this environment.
    os.environ["PYTHONPATH"] = os.pathsep.join([str(HERE), *([old] if old else [])])
    try:
        cluster = local(num_cpus=2, temp_dir=nb_home / "cache" / "ray", token_path=nb_home / "config" / "ray_token")
    finally:
        if old is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = old
    cluster.engine_module = "fake_engine"
    yield cluster
    cluster.shutdown()


@pytest.fixture()
def nb_env(nb_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point skyrl-nb's cache/config dirs at the session's, so `local()` reuses the session cluster."""
    monkeypatch.setenv("SKYRL_NB_CACHE_DIR", str(nb_home / "cache"))
    monkeypatch.setenv("SKYRL_NB_CONFIG_DIR", str(nb_home / "config"))
    monkeypatch.setenv("SKYRL_NB_ENGINE_MODULE", "fake_engine")
    return nb_home


@pytest.fixture()
def spy_cluster() -> Any:
    """A `Cluster` whose submissions are recorded, not sent; as a cluster on this machine would be, it sees this
    disk (no probe job) and has the engine installed."""
    import spy_cluster as spy

    return spy.spy_cluster(shares_disk=True)


@pytest.fixture()
def shell(tmp_path: Path) -> Any:
    """A real IPython shell with `%load_ext skyrl_nb`, runs under tmp_path."""
    from IPython.core.interactiveshell import InteractiveShell

    sh = InteractiveShell.instance()
    sh.run_line_magic("load_ext", "skyrl_nb")
    sh.run_line_magic("config", f"SkyrlMagics.run_root = {str(tmp_path / 'runs')!r}")
    magics = sh.magics_manager.registry["SkyrlMagics"]
    magics.jobs.clear()
    magics.last_run = None
    magics.cluster = ""
    magics.show_dashboard = False
    yield sh


sys.path.insert(0, str(HERE))
