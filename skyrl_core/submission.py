"""How a job's resolved config travels with its Ray submission, so the cluster needs no disk it shares with
the notebook.

The notebook puts the config's YAML in the job's runtime env (``env_vars[CONFIG_ENV]``) and submits
``python -m skyrl_engine train --config env:SKYRL_NB_CONFIG``; the engine reads it back with
:func:`config_source`. Ray keeps the runtime env with the job, so a resume can read the config it
was submitted with from Ray's job info, again without a shared disk. The config holds no secrets
(``JobConfig`` has none; tokens and cloud credentials are the cluster's environment).
"""

from __future__ import annotations

import os
from typing import Any

import yaml

#: The runtime-env variable holding the submitted config's YAML.
CONFIG_ENV = "SKYRL_NB_CONFIG"
#: ``--config`` values naming an environment variable: ``env:<NAME>``.
ENV_PREFIX = "env:"
#: The largest config that travels in a submission. Linux refuses one environment string over 128 KiB
#: (MAX_ARG_STRLEN) when the job's driver starts; a config is a few KiB.
MAX_CONFIG_BYTES = 96 * 1024


def pack_config(config_yaml: str) -> tuple[dict[str, str], str]:
    """``(env_vars, config_arg)`` for a config's YAML: what goes in the runtime env, and ``--config``'s value.

    Raises ``ValueError`` (one line: its size and the limit) when the YAML is too large to travel.

    >>> pack_config("trainer: {seed: 3}\\n")[1]
    'env:SKYRL_NB_CONFIG'
    """
    size = len(config_yaml.encode())
    if size > MAX_CONFIG_BYTES:
        raise ValueError(f"config: the resolved config is {size / 1024:.1f} KiB of YAML; at most "
                         f"{MAX_CONFIG_BYTES // 1024} KiB travel with a submission (keep data in files, "
                         "data.train_data, not inline)")
    return {CONFIG_ENV: config_yaml}, ENV_PREFIX + CONFIG_ENV


def config_source(arg: str, environ: dict[str, str] | None = None) -> str | dict[str, Any]:
    """What ``--config`` names, for ``skyrl_core.config.load_config``: ``env:NAME`` becomes the mapping in
    that variable; anything else (a preset name, a YAML path) is returned as it is.

    Raises ``ValueError`` (one line) when the variable is missing or does not hold a YAML mapping.
    """
    if not arg.startswith(ENV_PREFIX):
        return arg
    name = arg[len(ENV_PREFIX):]
    text = (os.environ if environ is None else environ).get(name)
    if text is None:
        raise ValueError(f"--config: {arg!r} names the environment variable {name}, which is not set in this "
                         "process (the job's runtime env carries it)")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        raise ValueError(f"--config: the environment variable {name} does not hold a YAML mapping")
    return data


def submitted_config(runtime_env: dict[str, Any] | None) -> str | None:
    """The config YAML a job was submitted with, from its runtime env (Ray's job info); None if it has none."""
    env_vars = (runtime_env or {}).get("env_vars") or {}
    value = env_vars.get(CONFIG_ENV)
    return value if isinstance(value, str) and value.strip() else None
