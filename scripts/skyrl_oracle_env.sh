#!/usr/bin/env bash
# Build (or reuse) the isolated environment that holds SkyRL itself, used as a test oracle by
# tests/algorithms/test_parity_skyrl.py. It never touches the project's .venv.
#
#   scripts/skyrl_oracle_env.sh            # prints the oracle python path on its last line
#   SKYRL_ORACLE_VENV=/some/dir scripts/skyrl_oracle_env.sh
#
# Recipe measured in ../shared/MACHINE-NOTES.md: CPU torch pinned first (a bare torch pulls a
# multi-GB CUDA build), then SkyRL 0.3.0 (the newest release pip offers on Python 3.11) and the
# modules its ppo_utils imports. A stamp file marks a finished build, so a half-built env is redone.
set -euo pipefail

VENV="${SKYRL_ORACLE_VENV:-${HOME}/.cache/skyrl-nb/skyrl-oracle-venv}"
PYTHON="${PYTHON:-python3.11}"
# shellcheck source=cached_venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/cached_venv.sh"

build() {
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" torch==2.13.0 skyrl==0.3.0 omegaconf skyrl-gym==0.4.0 loguru jaxtyping ray==2.56.0 \
    aiohttp cloudpickle numpy
}
# Two test sessions may ask at once: the second waits for the first build instead of racing it.
cached_venv "${VENV}" .stamp-skyrl-0.3.0 build
echo "${VENV}/bin/python"
