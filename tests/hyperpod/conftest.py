"""Shared fixtures for the HyperPod tests: the KubeRay CRD schema, fake AWS credentials, the fake
Kubernetes API server, and the collection of every test's output for the secret scan."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
for extra in (REPO, REPO / "widgets", HERE):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

from hyperpod_common import (  # noqa: E402  (after the sys.path set-up above)
    FAKE_ACCESS_KEY,
    FAKE_SECRET_KEY,
    LOG_FILE,
    OUTPUTS,
    REGION,
    SEEN_SECRETS,
)


def shared_dir() -> Path:
    """``../shared`` beside the checkout (CI keeps a copy there); ``SKYRL_NB_SHARED`` overrides."""
    env = os.environ.get("SKYRL_NB_SHARED")
    candidates = [Path(env)] if env else []
    candidates += [REPO.parent / "shared", REPO / "shared"]
    for c in candidates:
        if (c / "kuberay" / "ray.io_rayclusters.yaml").is_file():
            return c
    pytest.fail(
        "KubeRay CRD not found: expected ray.io_rayclusters.yaml under one of "
        + ", ".join(str(c / "kuberay") for c in candidates)
        + " (the `shared` directory beside the repository checkout; set SKYRL_NB_SHARED to point elsewhere)",
        pytrace=False,
    )


@pytest.fixture(scope="session")
def crd_schema() -> dict[str, Any]:
    """The ``ray.io/v1`` openAPIV3Schema of the RayCluster CRD."""
    import yaml

    path = shared_dir() / "kuberay" / "ray.io_rayclusters.yaml"
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd = yaml.load(path.read_text(), Loader=loader)
    assert crd["spec"]["group"] == "ray.io" and crd["spec"]["names"]["kind"] == "RayCluster"
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return version["schema"]["openAPIV3Schema"]


@pytest.fixture(autouse=True)
def fake_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fake credentials for moto and the signer; no real AWS config is read."""
    from fake_aws import use_fake_credentials

    use_fake_credentials(monkeypatch, FAKE_ACCESS_KEY, FAKE_SECRET_KEY, REGION)


@pytest.fixture(scope="session")
def _fresh_log_file() -> Path:
    LOG_FILE.unlink(missing_ok=True)
    return LOG_FILE


@pytest.fixture(autouse=True)
def debug_log_file(_fresh_log_file: Path) -> Any:
    """During each hyperpod test, everything skyrl_nb logs at DEBUG is appended to a file the secret
    scan reads (per test, so other test directories keep their logging untouched)."""
    handler = logging.FileHandler(LOG_FILE)
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logger = logging.getLogger("skyrl_nb")
    old = logger.level
    logger.setLevel(logging.DEBUG)
    logger.addHandler(handler)
    yield LOG_FILE
    logger.removeHandler(handler)
    logger.setLevel(old)
    handler.close()


@pytest.fixture(scope="session")
def _botocore_loader() -> Any:
    """One data loader for every test's session: the SageMaker service model takes seconds to parse."""
    import botocore.loaders

    return botocore.loaders.create_loader()


@pytest.fixture
def boto_session(_botocore_loader: Any) -> Any:
    """A fresh boto3 session with the fake credentials (sharing the parsed service models)."""
    import boto3
    import botocore.session
    import moto  # noqa: F401  (moto hooks botocore sessions made after it is imported)

    core = botocore.session.Session()
    core.register_component("data_loader", _botocore_loader)
    return boto3.Session(aws_access_key_id=FAKE_ACCESS_KEY, aws_secret_access_key=FAKE_SECRET_KEY,
                         region_name=REGION, botocore_session=core)


@pytest.fixture
def fake_k8s(crd_schema: dict[str, Any]) -> Any:
    """A running fake API server (TLS, CRD validation, fake KubeRay operator)."""
    from fake_k8s import FakeKubernetes

    with FakeKubernetes(crd_schema=crd_schema) as fake:
        yield fake
        SEEN_SECRETS.update(fake.ray_tokens.values())
        # Real signed EKS tokens are credentials too (the fixtures' dummy short one is not).
        SEEN_SECRETS.update(b for b in fake.bearers if len(b) > 100)


@pytest.fixture
def kube(fake_k8s: Any) -> Any:
    """A KubeClient on the fake API server, pinned to its CA, with an EKS-shaped bearer token."""
    from skyrl_nb.cluster.kube import KubeClient

    return KubeClient(fake_k8s.server, token=lambda: "k8s-aws-v1.dGVzdA", ca_data=fake_k8s.ca_data,
                      eks_cluster="hp-eks")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "hyperpod" not in report.nodeid:
        return
    text = "\n".join(content for _, content in report.sections)
    if report.longrepr is not None:
        text += "\n" + str(report.longrepr)
    OUTPUTS.append((report.nodeid, text))
