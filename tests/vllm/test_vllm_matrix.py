"""Issue 11's matrix for the vLLM backend: every pairing of loop × estimator × placement × schedule runs
2 steps through vLLM-CPU engines or is refused by validation in one line. Multi-turn text2sql episodes
take more than one assistant turn; gae trains a critic.

Starting a vLLM-CPU engine takes ~17 s here, so the 32 runnable pairings share one running engine
(handed to each cell's workers as ``generator_backend``); everything else (placement groups, the policy,
critic and reference actors, the generator role with its loop, weight sync into the engine) is built
per cell by ``Workers.create``, as in a job.
"""

from __future__ import annotations

import pytest
from combination_matrix import check, timings, walk
from ray_clusters import private_ray_cluster

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    """A private 4-CPU local Ray cluster: the shared engine, plus a cell's policy and engine bundles."""
    with private_ray_cluster(4) as ray:
        yield ray


def test_every_vllm_pairing_runs_or_is_refused(tmp_path, tiny_model_dirs, vllm_python, ray_cluster):
    from skyrl_engine.multiturn import context_tokens
    from skyrl_engine.vllm_engine import VLLMGenerator

    model_dir = tiny_model_dirs[0]
    # room for multi-turn episodes, as GeneratorWorker starts engines for generator.max_turns > 1
    engine = VLLMGenerator(model_dir, python=vllm_python, dtype="float32", num_threads=1, seed=42,
                           max_model_len=context_tokens(256))
    try:
        outcomes = walk("vllm", model_dir, tmp_path, generator_backend=engine)
    finally:
        engine.shutdown()
    print(timings(outcomes))
    check(outcomes, "vllm")
    ran = [o for o in outcomes if not o.refused]
    assert len(ran) == 32 and len(outcomes) - len(ran) == 16
