"""Fast parity check: ours vs SkyRL 0.3.0 outputs recorded in the repository (seed 0).

The same comparison as test_parity_skyrl.py without building SkyRL's env; re-record with
``.venv/bin/python tests/algorithms/parity_cases.py --record`` when the SkyRL pin moves.
"""

import numpy as np
from parity_cases import RECORDED, TOLERANCE, max_abs_diffs, ours


def test_matches_recorded_skyrl_outputs():
    with np.load(RECORDED) as data:
        inputs = {k[3:]: data[k] for k in data.files if k.startswith("in/")}
        skyrl = {k[4:]: data[k] for k in data.files if k.startswith("out/")}
    assert str(skyrl["__skyrl_version__"]) == "0.3.0"
    diffs = max_abs_diffs(ours(inputs), skyrl)
    bad = {k: d for k, d in diffs.items() if not d <= TOLERANCE}
    assert not bad, f"differ from the recorded SkyRL outputs by more than {TOLERANCE}: {bad}"
