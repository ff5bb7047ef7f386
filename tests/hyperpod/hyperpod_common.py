"""Constants and session-wide collections shared by the HyperPod tests and their conftest.

Test modules import these from here, never from ``conftest``: with several ``conftest.py`` files in
one pytest run, the module named ``conftest`` may be another directory's.
"""

from __future__ import annotations

import os
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]

#: Fake AWS credentials: the secret key must never show up in any output (test_hyperpod_zz_secrets).
FAKE_ACCESS_KEY = "FAKEACCESSKEYHYPERPOD"  # not AKIA-shaped: secret scanners must not flag it
FAKE_SECRET_KEY = "fakeSecretKey/HyperPod+Test0123456789abcdEFGH"
REGION = "us-west-2"

#: Secrets seen during the session (Ray tokens the fake operator generated, the AWS secret key).
SEEN_SECRETS: set[str] = {FAKE_SECRET_KEY}
#: Captured stdout/stderr/log text and failure reports of every hyperpod test so far.
OUTPUTS: list[tuple[str, str]] = []
LOG_FILE = Path(os.environ.get("SKYRL_NB_HYPERPOD_TEST_LOG", "/tmp/skyrl-nb-hyperpod-tests.log"))
