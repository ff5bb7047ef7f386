"""A `Cluster` whose job submissions are recorded, not sent (no Ray): what a launch or an evaluation would submit.

Shared by the notebook tests (the ``spy_cluster`` fixture) and the evaluation tests (``tests/`` is on sys.path
through its conftest).
"""

from __future__ import annotations

from typing import Any


class SpyClient:
    """Stands in for JobSubmissionClient and records what would have been submitted."""

    def __init__(self) -> None:
        self.submitted: list[dict[str, Any]] = []

    def submit_job(self, **kwargs: Any) -> str:
        self.submitted.append(kwargs)
        return kwargs["submission_id"]

    def list_jobs(self) -> list[Any]:
        return []


def spy_cluster(*, shares_disk: bool = True) -> Any:
    """A spy `Cluster` (its client a :class:`SpyClient`, no dashboard: versions unknown). ``shares_disk``: as a
    cluster on this machine, it sees this disk (no probe job) and has the engine installed; else it sees none of
    it and gets the code shipped."""
    from skyrl_nb.cluster.base import Cluster

    cluster = Cluster("http://127.0.0.1:9", token="spy-token", name="spy")
    cluster._client_obj = SpyClient()
    cluster.shared_paths = ("/",) if shares_disk else ()
    cluster.code = "installed" if shares_disk else "ship"
    return cluster
