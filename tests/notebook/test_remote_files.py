"""The files a config names are checked where the job reads them (models, data, a resume path).

A cluster that shares no disk with the notebook (HyperPod: the model on the pods' FSx) must not be refused a
model the notebook cannot see, nor sent a job whose model is missing on the cluster. The session's real Ray
head, reached through `connect` (so not known to be on this machine), answers with a probe job running the
engine's own ``validate``: its lines are the notebook's error, and nothing is written or submitted.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.fixture()
def remote(ray_cluster: Any) -> Any:
    """The session's head as a cluster elsewhere: reached by address, the engine installed there."""
    from skyrl_nb.cluster import connect

    cluster = connect(ray_cluster.address, token=ray_cluster._token)
    cluster.code = "installed"
    assert not cluster.runs_here and not cluster.shared_paths
    return cluster


def test_a_remote_cluster_judges_the_files_a_config_names(remote: Any, tiny_model_dir: str, tmp_path: Path) -> None:
    from skyrl_core.config import ConfigError, local_paths

    runs = tmp_path / "runs"
    missing = ["trainer.policy.model.path=/nonexistent/models/qwen", "data.val_data=[/nonexistent/val.parquet]"]
    cfg = remote.prepare("quickstart", overrides=[*missing, f"run.run_root={runs}"])  # not judged here
    assert local_paths(cfg) == {"trainer.policy.model.path": ["/nonexistent/models/qwen"],
                                "data.val_data": ["/nonexistent/val.parquet"]}
    with pytest.raises(ConfigError) as err:
        remote.check_files(cfg)
    lines = err.value.problems
    assert len(lines) == 2 and all("\n" not in line for line in lines), lines
    assert lines[0].startswith("data.val_data: file '/nonexistent/val.parquet' does not exist"), lines
    assert lines[1].startswith("trainer.policy.model.path: '/nonexistent/models/qwen' is not a local Hugging Face"), lines

    present = remote.prepare("quickstart", overrides=[f"trainer.policy.model.path={tiny_model_dir}"])
    assert remote.check_files(present) == "1 path(s) checked on the cluster by a probe job"
    assert remote.check_files(remote.prepare("quickstart")).startswith("none on a disk")

    before = {j.submission_id for j in remote.jobs()}
    with pytest.raises(ConfigError, match=r"^trainer.policy.model.path: '/nonexistent/models/qwen'"):
        remote.launch("quickstart", overrides=[missing[0], f"run.run_root={runs}"], run_id="remote-missing")
    assert not (runs / "remote-missing").exists()  # nothing written
    assert {j.submission_id for j in remote.jobs()} == before  # and no training job submitted
