# Sourced by the scripts that build a test-only environment in ~/.cache (skyrl_oracle_env.sh,
# make_vllm_env.sh, mlflow_server_env.sh, py312_env.sh): one way to build such an env once and share it.
#
#   cached_venv VENV STAMP_NAME BUILD_FUNCTION
#
# Takes the lock VENV.lock for the rest of the calling script (two test sessions asking at once: the
# second waits for the first build, then finds the stamp). Unless VENV/STAMP_NAME exists (a finished
# build), removes what a half-finished build left, creates VENV with $PYTHON, runs BUILD_FUNCTION (which
# installs into it, with "${PIP[@]}" when it likes), writes the stamp and prints the build time to stderr.
cached_venv() {
  local venv=$1 stamp=$2 build=$3 start
  mkdir -p "$(dirname "${venv}")"
  exec 9>"${venv}.lock"
  flock 9
  if [[ ! -f "${venv}/${stamp}" ]]; then
    start=$(date +%s)
    rm -rf "${venv}"
    "${PYTHON:-python3.11}" -m venv "${venv}"
    PIP=("${venv}/bin/python" -m pip install -q --disable-pip-version-check --no-compile)
    "${build}"
    touch "${venv}/${stamp}"
    echo "built ${venv} in $(( $(date +%s) - start )) s" >&2
  fi
}

# The path of a Python 3.12: python3.12 on PATH, else pyenv's newest versions/3.12* (these machines have pyenv with
# 3.12 installed but not selected: its shim refuses). Exits 3 with one line when there is none.
find_python312() {
  if python3.12 -c "" 2>/dev/null; then command -v python3.12; return; fi
  local found
  found=$(ls -d "$(pyenv root 2>/dev/null || echo "${HOME}/.pyenv")"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1)
  [[ -n "${found}" ]] || { echo "no Python 3.12 found (python3.12 on PATH or pyenv's versions/3.12*)" >&2; exit 3; }
  echo "${found}"
}
