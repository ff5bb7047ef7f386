#!/usr/bin/env bash
# Build (or reuse) the isolated environment that runs a real `mlflow server` for
# tests/tracking/test_mlflow.py. It never touches the project's .venv: the full mlflow package pins
# pyarrow<26 and pulls matplotlib, scikit-learn and a SQL stack; the engine itself logs through
# mlflow-skinny (the client), which .venv has.
#
#   scripts/mlflow_server_env.sh            # prints the environment's python path on its last line
#   SKYRL_MLFLOW_VENV=/some/dir scripts/mlflow_server_env.sh
#
# A stamp file marks a finished build, so a half-built env is redone; a lock lets two test sessions
# share one build.
set -euo pipefail

VERSION=3.17.2
VENV="${SKYRL_MLFLOW_VENV:-${HOME}/.cache/skyrl-nb/mlflow-server-venv}"
PYTHON="${PYTHON:-python3.11}"
# shellcheck source=cached_venv.sh
source "$(dirname "${BASH_SOURCE[0]}")/cached_venv.sh"

build() {
  "${PIP[@]}" "mlflow==${VERSION}"
}
cached_venv "${VENV}" ".stamp-mlflow-${VERSION}" build
echo "${VENV}/bin/python"
