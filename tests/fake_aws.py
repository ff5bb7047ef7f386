"""Fake AWS credentials for one test (through its monkeypatch): moto, in process or as a server, accepts any key
pair, and nothing of this machine's own AWS set-up leaks in (config and credentials files, a profile, a session
token, a region or endpoint override, the instance metadata service).

Shared by the registry, HyperPod and export tests (``tests/`` is on sys.path through its conftest).
"""

from __future__ import annotations

import pytest


def use_fake_credentials(monkeypatch: pytest.MonkeyPatch, access_key: str, secret_key: str,
                         region: str = "us-east-1") -> None:
    """Set ``access_key`` / ``secret_key`` and ``region`` as the only AWS settings boto3 finds."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", access_key)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret_key)
    monkeypatch.setenv("AWS_DEFAULT_REGION", region)
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)
