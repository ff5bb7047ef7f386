# Sourced by the scripts that build a test-only environment in ~/.cache (skyrl_oracle_env.sh,
# make_vllm_env.sh, mlflow_server_env.sh): one way to build such an env once and share it.
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
