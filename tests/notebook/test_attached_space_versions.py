"""Issue 37, item 3: `connect()` with no address inside a Studio Space attached to a Ray cluster, and the Ray /
Python version check every submission goes through.

The attached Space is faked the way skyrl-nb assumes Studio exposes it (docs/hyperpod.md, "Attached Spaces"):
the address in ``RAY_API_SERVER_ADDRESS`` / ``RAY_ADDRESS``, as Ray's own ``ray job submit`` reads it; the
cluster is the session's real local Ray head. The version refusal goes through the real ``Cluster.launch`` of
that head, with only its dashboard's version answers replaced."""

from __future__ import annotations

import platform
import warnings
from pathlib import Path
from typing import Any

import pytest

from skyrl_nb.cluster.versions import Versions, version_problems


def _other_versions(cluster: Any, monkeypatch: pytest.MonkeyPatch, ray: str, python: str) -> None:
    """Make ``cluster``'s dashboard say it runs ``ray`` on ``python``; every other request reaches the real head."""
    real = cluster._get

    def answer(path: str, timeout: float = 10.0) -> Any:
        if path.startswith("/api/version"):
            return {"version": "4", "ray_version": ray, "ray_commit": "x", "session_name": "s"}
        if path.startswith("/api/v0/cluster_metadata"):
            return {"result": True, "msg": "", "data": {"rayVersion": ray, "pythonVersion": python}}
        return real(path, timeout=timeout)

    monkeypatch.setattr(cluster, "_get", answer)


def test_connect_without_an_address_reaches_the_attached_cluster(ray_cluster: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_nb.cluster import connect

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.delenv("RAY_API_SERVER_ADDRESS", raising=False)
    with pytest.raises(ValueError, match=r"^connect\(\) without an address looks for the Ray cluster this Studio "
                                         r"Space is attached to \(RAY_API_SERVER_ADDRESS or RAY_ADDRESS\)"):
        connect()
    monkeypatch.setenv("RAY_API_SERVER_ADDRESS", ray_cluster.address)
    monkeypatch.setenv("RAY_AUTH_TOKEN", ray_cluster._token)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # same interpreter: no version warning
        cluster = connect()
    assert cluster.address == ray_cluster.address and cluster is not ray_cluster
    assert cluster.ping() == ray_cluster.ping()
    assert cluster.resources()["CPU"] == 2.0  # the session's head, through its Jobs and state APIs


def test_connect_to_an_attached_cluster_warns_when_ray_init_would_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Studio does not warn when only Python differs; ray.init() from the kernel needs an exact match."""
    from skyrl_nb.cluster import connect, versions

    ours = versions.here()
    monkeypatch.setenv("RAY_ADDRESS", "ray://ray-head.hyperpod-ns-team-a.svc.cluster.local:10001")
    monkeypatch.setattr("skyrl_nb.cluster.base.Cluster.ping", lambda self, timeout=5.0: ours.ray)
    monkeypatch.setattr(versions, "cluster_versions", lambda cluster: Versions(ours.ray, "3.11.0"))
    with pytest.warns(UserWarning, match=rf"the attached cluster runs Ray {ours.ray} on Python 3.11.0, this kernel "
                                         rf"Ray {ours.ray} on Python {platform.python_version()}: ray.init\(\)"):
        cluster = connect()
    assert cluster.address == "http://ray-head.hyperpod-ns-team-a.svc.cluster.local:8265"


def test_the_session_head_reports_this_interpreters_versions(ray_cluster: Any) -> None:
    from skyrl_nb.cluster.versions import check_versions, cluster_versions, here

    assert cluster_versions(ray_cluster) == here() == Versions(here().ray, platform.python_version())
    assert check_versions(ray_cluster, "ship") == here()  # the local clusters the suite starts pass


def test_another_ray_or_python_is_refused_before_anything_is_submitted(ray_cluster: Any, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from skyrl_core.config import ConfigError
    from skyrl_nb.cluster.versions import VersionMismatch, here

    jobs_before = {job.submission_id for job in ray_cluster.client.list_jobs()}
    ours = here()
    py_minor = ".".join(ours.python.split(".")[:2])
    other_python = "3.12.4" if py_minor != "3.12" else "3.11.9"
    for i, (ray, python) in enumerate([("2.52.1", ours.python), (ours.ray, other_python)]):
        _other_versions(ray_cluster, monkeypatch, ray, python)
        with pytest.raises(VersionMismatch) as refused:
            ray_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id=f"versions-{i}",
                               code="ship")
        assert isinstance(refused.value, ConfigError)
        (line,) = refused.value.problems
        assert "\n" not in line
        assert line.startswith(f"ray/python: the cluster runs Ray {ray} on Python {python}, but this notebook ships "
                               f"the engine for Ray {ours.ray} on Python {ours.python}")
        assert f"install ray[default]=={ray} here in a Python {'.'.join(python.split('.')[:2])} environment" in line
        monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []  # no run folder
    assert {job.submission_id for job in ray_cluster.client.list_jobs()} == jobs_before  # no job, no probe


def test_the_rule() -> None:
    nb = Versions("2.60.0", "3.11.7")
    assert version_problems(Versions("2.60.1", "3.11.9"), "ship", nb) == []  # patch levels may differ
    assert version_problems(None, "ship", nb) == []  # the dashboard did not say: nothing refused
    assert version_problems(Versions("2.60.0", None), "ship", nb) == []  # an older Ray without cluster metadata
    assert len(version_problems(Versions("2.60.0", "3.12.1"), "ship", nb)) == 1  # Python alone differs
    for mode in ("installed", "image"):  # the cluster's own engine, built with its own Ray and Python
        assert version_problems(Versions("2.52.1", "3.12.1"), mode, nb) == []
    assert repr(nb) == "Versions(ray=2.60.0, python=3.11.7)" and "<code>" in nb._repr_html_()
