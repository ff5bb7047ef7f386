#!/usr/bin/env bash
# Build (or reuse) the Python 3.12 environment in which `make test` runs the notebook side's tests
# (tests/contracts/test_python312.py): SageMaker Studio's current images run Python 3.12, .venv runs 3.11.
# It holds what `import skyrl_nb`, skyrl_core and the widgets need (the project's core dependencies and its
# notebook and aws extras, at constraints.txt's versions) plus the test tools; no torch, no engine. The project
# itself is NOT installed: the test puts the checkout on PYTHONPATH, so one cached env serves every clone.
#
#   scripts/py312_env.sh                 # prints the env's python path on its last line
#   SKYRL_PY312_VENV=/some/dir scripts/py312_env.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${SKYRL_PY312_VENV:-${HOME}/.cache/skyrl-nb/py312-notebook-venv}"
# shellcheck source=cached_venv.sh
source "${ROOT}/scripts/cached_venv.sh"
PYTHON="${PY312:-$(find_python312)}"

# The stamp names a digest of pyproject.toml and constraints.txt: a change to either rebuilds the env.
STAMP=".stamp-py312-$(cat "${ROOT}/pyproject.toml" "${ROOT}/constraints.txt" | sha256sum | cut -c1-12)"

build() {
  mapfile -t DEPS < <("${VENV}/bin/python" - "${ROOT}/pyproject.toml" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
for dep in [*project["dependencies"], *extras["notebook"], *extras["aws"], *extras["mlflow"]]:
    print(dep)
PY
)
  "${PIP[@]}" -c "${ROOT}/constraints.txt" "${DEPS[@]}" pytest pytest-timeout "moto[sagemaker,eks,sts,s3,server]" sagemaker-core \
    jsonschema import-linter
  "${VENV}/bin/python" -c "import sys, ray, pandas, ipywidgets; assert sys.version_info[:2] == (3, 12), sys.version"
}
cached_venv "${VENV}" "${STAMP}" build
echo "${VENV}/bin/python"
