"""A launch's inputs, made ready before any cluster is asked: the run id rule, the full validation of a config
and its overrides (``prepare_config``), the plug-in modules shipped with the job, the runtime env a job is submitted
with (``job_env``), and the Jobs API metadata that ties a submission to its run."""

from __future__ import annotations

import os
import re
import shutil
import sys
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig
    from skyrl_nb.cluster.shipping import EngineCode


# Metadata keys put on every submission so `Cluster.jobs()` can find the run behind a job.
META_RUN_ID = "skyrl_nb_run_id"


META_RUN_DIR = "skyrl_nb_run_dir"


META_ATTEMPT = "skyrl_nb_attempt"


def new_run_id(preset: str | None = None, train_data: Iterable[str] = ()) -> str:
    """A fresh run id: `<name>-<YYYYmmdd-HHMMSS>-<4 hex>`.

    `<name>` is the stem of the first training file when it is the user's own (``mydata`` for
    ``s3://bucket/mydata.parquet``), else the preset's name, else ``run``.

    >>> new_run_id("quickstart", ["/data/mydata.jsonl"])   # doctest: +SKIP
    'mydata-20261203-172500-1a2b'
    """
    first = next(iter(train_data), "")
    own = bool(first) and not first.startswith("builtin://")
    name = first.rstrip("/").rpartition("/")[2].split(".")[0] if own else ""
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", name or preset or "run").strip("-")[:40].strip("-") or "run"
    return f"{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def prepare_config(config: Any, *, overrides: list[str] | dict[str, Any] | None = None,
                   run_id: str | None = None, check_files: bool = True) -> JobConfig:
    """Validate `config` (+ `overrides`) fully and fill in `run.run_id` / an absolute `run.run_root`.

    Raises `ConfigError` (one line per problem). Nothing is written and nothing is submitted:
    `Cluster.launch` and `%skyrl launch` call this first, so a bad config never reaches a cluster.
    ``check_files=False`` leaves the files the config names unchecked here (a cluster elsewhere checks them:
    `Cluster.check_files`).
    """
    from skyrl_core.config import PRESETS, ConfigError, check_config
    from skyrl_core.runs import RunReader
    from skyrl_core.store import is_url

    # the one validation (every problem in one pass, launch's run-id and run-root rules included)
    cfg = check_config(config, overrides, run_id=run_id, check_files=check_files)
    preset = config if isinstance(config, str) and config in PRESETS else None
    rid = cfg.run.run_id or new_run_id(preset, cfg.data.train_data)
    root = cfg.run.run_root if is_url(cfg.run.run_root) else os.path.expanduser(cfg.run.run_root)
    # The job reads this config on the cluster: spell the run root out, no `~`.
    fixed = {"run.run_id": str(rid), "run.run_root": root}
    if any(cfg.get(k) != v for k, v in fixed.items()):
        cfg = check_config(cfg, fixed, check_files=check_files)
    if RunReader(cfg.run_dir).exists():
        raise ConfigError(
            [f"run.run_id: {rid!r} already exists in {root}; pick another id, or resume that run"]
        )
    return cfg


def plugin_py_modules(plugins: Iterable[str], staging: str | os.PathLike[str]) -> list[str]:
    """The config's ``plugins:`` modules as Ray ``py_modules`` entries (folders), so the job can import them.

    A cluster that shares no disk with the notebook imports the same code this way. A package ships
    its top-level folder (``my_pkg.losses`` ships ``my_pkg``, so the dotted import works). A single
    module file is copied into ``staging`` as a one-file package, ``<name>/__init__.py``: Ray's job
    client (2.x) uploads a ``.py`` entry as if it were a folder and fails, while a folder works. The
    modules are imported here first (``load_config`` already did); a built-in one is left out.

    >>> plugin_py_modules(["my_skyrl_plugin"], "/tmp/staging")        # doctest: +SKIP
    ['/tmp/staging/my_skyrl_plugin']
    """
    from skyrl_core.config import ConfigError
    from skyrl_core.registry import PluginError, load_plugins

    plugins = list(plugins)
    try:
        load_plugins(plugins)
    except PluginError as err:
        raise ConfigError([str(err)]) from None
    paths: list[str] = []
    for name in plugins:
        top_name = name.partition(".")[0]
        top = sys.modules[top_name]
        folders = [str(f) for f in getattr(top, "__path__", None) or []]
        if len(folders) > 1:
            raise ConfigError([f"plugins: {name!r} is a namespace package spread over {len(folders)} folders "
                               f"({', '.join(folders)}); Ray ships one folder per module"])
        if folders:
            paths.append(folders[0])
            continue
        file = getattr(top, "__file__", None)
        if file is None:
            continue  # built into Python: the cluster has it
        if not file.endswith(".py"):
            raise ConfigError([f"plugins: {name!r} is the compiled file {file}; Ray ships Python source "
                               "(a .py module or a package folder)"])
        package = Path(staging) / top_name
        package.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(file, package / "__init__.py")
        paths.append(str(package))
    return list(dict.fromkeys(paths))


STOP_GRACE_S = 15
"""Seconds a stopped job has between Ray's SIGTERM and its SIGKILL (``RAY_JOB_STOP_WAIT_TIME_S`` in the job's
runtime env, which Ray's job supervisor reads; Ray's own default is 3). The engine records a stop (status
``stopped``) as soon as its SIGTERM handler runs; a driver starved of CPU on a busy machine took longer than 3 s to
get there and was killed first, leaving its status ``running``. A job's own ``env_vars`` may set another value."""


def job_env(run_dir: str, runtime_env: dict[str, Any] | None, config_vars: dict[str, str], code: EngineCode,
            plugins: Any, staging: str) -> dict[str, Any]:
    """The runtime env a job is submitted with: the caller's ``runtime_env`` plus our env vars (unbuffered output,
    the run's folder, `STOP_GRACE_S`; the caller's own win) and the packed config's (``config_vars``), the engine's
    code (``code``) and the config's plug-in modules (``plugins``, staged in ``staging``, a folder that lives until
    the job is submitted: `plugin_py_modules`). Training and evaluation jobs alike."""
    env = dict(runtime_env or {})
    env["env_vars"] = {"PYTHONUNBUFFERED": "1", "SKYRL_NB_RUN_DIR": run_dir, "RAY_JOB_STOP_WAIT_TIME_S": str(STOP_GRACE_S),
                       **(env.get("env_vars") or {}), **config_vars}
    code.apply(env)
    modules = plugin_py_modules(plugins, staging)
    if modules:
        env["py_modules"] = list(dict.fromkeys([*(env.get("py_modules") or []), *modules]))
    return env
