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

.PHONY: demo test lint bench clean-venv browser-deps

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Runtime install: the notebook side, the engine and the notebook tools the demo runs.
$(VENV)/.stamp-run: pyproject.toml | $(BIN)/python
	$(PIP) $(TORCH_PIN) -e ".[engine,notebook]"
	touch $@

# Dev install: everything above plus the test tools, moto, playwright.
$(VENV)/.stamp-dev: pyproject.toml $(VENV)/.stamp-run
	$(PIP) -e ".[engine,notebook,aws,dev]"
	touch $@

demo: $(VENV)/.stamp-run
	$(BIN)/python -m skyrl_nb.demo

browser-deps:
	@bash scripts/install-browser.sh

# The vLLM stage's env (~4 min cold, ~/.cache) builds in the background while the other tests run;
# scripts/make_vllm_env.sh holds a lock, so tests/vllm waits for it. SKYRL_VLLM_BUILD=0: no build.
# PYTHONFAULTHANDLER: a crash while Python shuts down (after pytest has let go of its own handler)
# still prints every thread's stack.
test: $(VENV)/.stamp-dev browser-deps
	@if [ "$${SKYRL_VLLM_BUILD:-1}" != "0" ]; then mkdir -p $$HOME/.cache/skyrl-nb; \
	  (bash scripts/make_vllm_env.sh > $$HOME/.cache/skyrl-nb/vllm-env-build.log 2>&1 &); fi
	PYTHONFAULTHANDLER=1 $(BIN)/python -m pytest -q -ra --durations=30 -p no:cacheprovider tests

lint: $(VENV)/.stamp-dev
	$(BIN)/ruff check .

clean-venv:
	rm -rf $(VENV)
