"""No AWS secret key, EKS bearer token or Ray token in any output: reprs, logs (DEBUG), captured
stdout/stderr of every hyperpod test, the executed quickstart notebook, and the manifests.

Runs last in tests/hyperpod (file name order). It also runs a full scenario of its own with real
credentials flowing (signed EKS tokens, the Ray token read from the Secret and sent through the
tunnel), so it proves something even when run alone.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hyperpod_common import LOG_FILE, OUTPUTS, REGION, SEEN_SECRETS
from test_hyperpod_notebook import SAVED


def _leaks(text: str, secrets: set[str]) -> list[str]:
    return sorted(s[:6] + "…" for s in secrets if s and s in text)


def test_scan_catches_a_planted_secret() -> None:
    assert _leaks("log line with tok-123456789 inside", {"tok-123456789"}) == ["tok-12…"]


def test_no_secret_anywhere(fake_k8s: Any, boto_session: Any, capsys: pytest.CaptureFixture[str],
                            caplog: pytest.LogCaptureFixture, tmp_path_factory: pytest.TempPathFactory) -> None:
    from fake_k8s import FakeRayDashboard

    from skyrl_nb import studio
    from skyrl_nb.cluster.hyperpod import WorkerGroup, hyperpod, list_hyperpod
    from skyrl_nb.cluster.kube import EksTokenSource, KubeClient

    caplog.set_level(logging.DEBUG, logger="skyrl_nb")
    tokens = EksTokenSource("hp-eks", region=REGION, session=boto_session)
    kube = KubeClient(fake_k8s.server, token=tokens, ca_data=fake_k8s.ca_data, eks_cluster="hp-eks")
    rc = hyperpod("hp", name="secretive", workers=[WorkerGroup("ml.g5.xlarge", 1)], kube=kube)
    shown: list[str] = []
    with FakeRayDashboard() as dash:
        status = rc.up(timeout=10, poll_s=0.01)  # default progress printing on
        dash.token = fake_k8s.ray_tokens["secretive"]
        fake_k8s.port_targets[("*head*", 8265)] = dash.address
        cluster = rc.connect(timeout=5)
        assert cluster.ping() == "2.52.1"  # the Ray token really travelled through the tunnel
        assert any(p.startswith("/api/version") for p in dash.hits)
        objects = [rc, status, cluster, cluster.port_forward, kube, tokens, rc.plan(), studio.info(),
                   *list_hyperpod(namespace="default", kube=kube), *rc.workers]
        for obj in objects:
            shown += [repr(obj), str(obj)]
            html = getattr(obj, "_repr_html_", None)
            if html is not None:
                shown.append(html())
        print("\n".join(shown))
        rc.delete()

    secrets = set(SEEN_SECRETS) | set(fake_k8s.ray_tokens.values()) | set(fake_k8s.bearers)
    assert fake_k8s.ray_tokens["secretive"] in secrets and any(b.startswith("k8s-aws-v1.") for b in fake_k8s.bearers)
    captured = capsys.readouterr()
    for handler in logging.getLogger("skyrl_nb").handlers:
        handler.flush()

    sources: dict[str, str] = {
        "reprs and _repr_html_": "\n".join(shown),
        "this test's stdout/stderr": captured.out + captured.err,
        "log records": "\n".join(f"{r.getMessage()} {r.args}" for r in caplog.records),
        f"DEBUG log file {LOG_FILE}": LOG_FILE.read_text() if LOG_FILE.exists() else "",
    }
    assert "secretive" in sources["reprs and _repr_html_"] and sources[f"DEBUG log file {LOG_FILE}"]
    for nodeid, text in OUTPUTS:
        sources[f"output of {nodeid}"] = text
    if SAVED.exists():
        sources[f"saved notebook {SAVED}"] = SAVED.read_text()
    for path in tmp_path_factory.getbasetemp().glob("*/manifests/*.yaml"):
        sources[str(path)] = path.read_text()

    leaks = {where: _leaks(text, secrets) for where, text in sources.items()}
    leaks = {k: v for k, v in leaks.items() if v}
    assert not leaks, f"secrets (first 6 chars shown) leaked into: {leaks}"
    print(f"scanned {len(sources)} sources, {sum(map(len, sources.values()))} chars, for {len(secrets)} secrets")
