#!/usr/bin/env bash
# Build (or reuse) the isolated TRL environment that `python -m bench vs_trl` runs TRL's GRPOTrainer in.
# It never touches the project's .venv.
#
#   scripts/make_trl_env.sh              # prints the env's python path on its last line
#   SKYRL_TRL_VENV=/some/dir scripts/make_trl_env.sh
#
# Recipe measured in ../shared/MACHINE-NOTES.md: trl installs beside the local CPU torch 2.13.0
# (pinned first: a bare torch pulls a multi-GB CUDA build) and runs GRPOTrainer with use_cpu=True.
# A stamp file marks a finished build, so a half-built env is redone.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKYRL_TRL_VENV:-${HOME}/.cache/skyrl-nb/trl-venv}"
PYTHON="${PYTHON:-python3.11}"
# shellcheck source=cached_venv.sh
source "${ROOT}/scripts/cached_venv.sh"

# transformers, tokenizers, accelerate and the rest at .venv's versions (constraints.txt): the two sides
# then run the same model code. skyrl-gym: the TRL side scores with skyrl-nb's own reward rules
# (skyrl_engine.tasks), which read skyrl-gym's gsm8k answer extraction.
build() {
  "${PIP[@]}" torch==2.13.0
  "${PIP[@]}" -c "${ROOT}/constraints.txt" torch==2.13.0 trl transformers datasets accelerate tokenizers \
    safetensors skyrl-gym pydantic pyyaml
  "${VENV}/bin/python" -c "import trl, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
}
cached_venv "${VENV}" .stamp-trl-2 build
ln -sfn "${VENV}" "${ROOT}/.venv-trl" 2>/dev/null || true
echo "${VENV}/bin/python"
