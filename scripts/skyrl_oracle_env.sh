#!/usr/bin/env bash
# Build (or reuse) an isolated environment that holds SkyRL itself, used as a test oracle by
# tests/algorithms/test_parity_skyrl.py and tests/skyrl_bridge/test_skyrl_oracle.py. It never touches the
# project's .venv. Two releases, each in its own env:
#
#   scripts/skyrl_oracle_env.sh            # SkyRL 0.3.0 on Python 3.11; prints its python on the last line
#   scripts/skyrl_oracle_env.sh 0.4.0      # SkyRL 0.4.0 on Python 3.12 (0.4.0 needs >= 3.12)
#   SKYRL_ORACLE_VENV=/some/dir scripts/skyrl_oracle_env.sh [VERSION]
#
# Recipes measured in ../shared/MACHINE-NOTES.md. 0.3.0: the CPU torch on this machine's disk pinned first
# (a bare torch pulls a multi-GB CUDA build), then SkyRL and the modules its ppo_utils and config import.
# 0.4.0: the disk's CPU torch is for 3.11 only and download.pytorch.org is not reachable, so torch 2.13.0
# comes from PyPI as its CUDA build with its nvidia packages (~4.7 GB, ~30 s here; it imports and runs on
# CPU), then SkyRL 0.4.0 with Ray 2.57.0 (its `ray` extra's pin). A stamp file marks a finished build, so a
# half-built env is redone.
set -euo pipefail

VERSION="${1:-0.3.0}"
EXTRA=()
STAMP_REV=""
CHECK="import torch"
# shellcheck source=cached_venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/cached_venv.sh"

case "${VERSION}" in
  0.3.0)
    VENV="${SKYRL_ORACLE_VENV:-${HOME}/.cache/skyrl-nb/skyrl-oracle-venv}"
    PYTHON="${PYTHON:-python3.11}"
    RAY=2.56.0
    ;;
  0.4.0)
    VENV="${SKYRL_ORACLE_VENV:-${HOME}/.cache/skyrl-nb/skyrl-0.4.0-oracle-venv}"
    PYTHON="${PY312:-$(find_python312)}"
    RAY=2.57.0
    EXTRA=(orjson pybase64)  # its config imports the inference client's wire format (skyrl-train's extra has them)
    STAMP_REV=-2  # the recipe's revision: a change rebuilds a cached env
    CHECK="from skyrl.train.config import SkyRLTrainConfig; SkyRLTrainConfig()"  # 3.12: imports as shipped
    ;;
  *)
    echo "skyrl_oracle_env.sh: SkyRL version ${VERSION} has no recipe; allowed: 0.3.0, 0.4.0" >&2
    exit 2
    ;;
esac

build() {
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" torch==2.13.0 "skyrl==${VERSION}" omegaconf skyrl-gym==0.4.0 loguru jaxtyping "ray==${RAY}" \
    aiohttp cloudpickle numpy ${EXTRA[@]+"${EXTRA[@]}"}
  "${VENV}/bin/python" -c "${CHECK}; from importlib.metadata import version as v; assert v('skyrl') == '${VERSION}'"
}
# Two test sessions may ask at once: the second waits for the first build instead of racing it.
cached_venv "${VENV}" ".stamp-skyrl-${VERSION}${STAMP_REV}" build
echo "${VENV}/bin/python"
