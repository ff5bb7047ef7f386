"""Issue 11's matrix for the torch backend: every pairing of loop × estimator × placement × schedule
runs 2 steps or is refused by validation in one line (slow: real Ray actors for disaggregated runs).
The vLLM half is tests/vllm/test_vllm_matrix.py."""

from __future__ import annotations

import pytest
from combination_matrix import check, timings, walk

pytestmark = pytest.mark.slow


def test_every_torch_pairing_runs_or_is_refused(tmp_path, tiny_model_dir, engine_ray):
    outcomes = walk("torch", tiny_model_dir, tmp_path)
    print(timings(outcomes))
    check(outcomes, "torch")
    ran = [o for o in outcomes if not o.refused]
    # 2 loops x 4 estimators x (colocated sync + disaggregated x 3 schedules)
    assert len(ran) == 32 and len(outcomes) - len(ran) == 16
