"""What can be checked before a submission is, and a job that dies before its first event says why.

- A data file in a row shape the engine's loader refuses is refused by ``launch()`` in one line naming the
  file, the row and the column: checked in the notebook when the cluster shares its disk, and by the probe
  job (the engine's own ``validate``) on a cluster elsewhere. The loader says the same words.
- A plug-in name registered from ``__main__`` (a notebook cell) is refused in one line: the cluster never
  runs that cell.
- A job whose driver dies before the engine writes anything is ``failed`` with Ray's reason, in
  ``Job.status_detail()``, the run's status.json and so ``list_runs`` / ``%skyrl list``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest


def _job_ids(cluster: Any) -> set[str]:
    return {j.submission_id for j in cluster.jobs()}


def _refusal(cluster: Any, overrides: list[str], run_id: str) -> str:
    """The one line ``cluster.launch`` refuses ``overrides`` with."""
    from skyrl_core.config import ConfigError

    with pytest.raises(ConfigError) as err:
        cluster.launch("quickstart", overrides=overrides, run_id=run_id)
    (line,) = err.value.problems
    assert "\n" not in line
    return line


def test_a_data_file_in_the_wrong_row_shape_is_refused_before_submission(ray_cluster: Any, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from skyrl_core.config import check_config
    from skyrl_core.datarows import RowShapeError
    from skyrl_engine.tasks import load_prompts
    from skyrl_nb.cluster import connect

    runs = tmp_path / "runs"
    # a question/answer table (no prompt column), and a JSONL file whose third row has a message with no content
    flat = tmp_path / "qa.parquet"
    pq.write_table(pa.Table.from_pylist([{"question": "1+1", "answer": "2"}] * 3), flat)
    chat = [{"role": "user", "content": "1+1"}]
    jsonl = tmp_path / "chat.jsonl"
    jsonl.write_text("".join(json.dumps(row) + "\n" for row in
                             [{"prompt": chat}, {"prompt": "2+2"}, {"prompt": [{"role": "user", "text": "3+3"}]}]))
    expected = {
        flat: f"data.train_data: '{flat}' row 1: column 'prompt' is missing (columns: 'question', 'answer'); "
              "expected prompt as a non-empty list of {role, content} messages (or a string), or name the prompt's "
              "column: columns={'prompt': <column>}",
        jsonl: f"data.train_data: '{jsonl}' row 3: column 'prompt' message 1 is {{'role': 'user', 'text': '3+3'}}; "
               "expected {role: <text>, content: <text>}",
    }
    before = _job_ids(ray_cluster)
    for i, (path, line) in enumerate(expected.items()):
        assert _refusal(ray_cluster, [f"data.train_data=[{path}]", f"run.run_root={runs}"], f"shape-{i}") == line
        # the engine's loader refuses the file with the same words
        with pytest.raises(RowShapeError) as err:
            load_prompts([str(path)])
        assert f"data.train_data: {err.value}" == line
    assert not runs.exists() and _job_ids(ray_cluster) == before  # no run folder, no job

    # a cluster that shares no disk with this notebook: its probe job (the engine's validate) says the same line
    remote = connect(ray_cluster.address, token=ray_cluster._token)
    remote.code = "installed"
    assert _refusal(remote, [f"data.train_data=[{flat}]", f"run.run_root={runs}"], "shape-remote") == expected[flat]
    assert not runs.exists()

    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"prompt": chat, "reward_spec": {"ground_truth": "2"}}) + "\n")
    assert check_config("quickstart", [f"data.train_data=[{good}]"]).data.train_data == [str(good)]
    assert [row.prompt for row in load_prompts([str(good)])] == [chat]


CELL = '''
from skyrl_core.registry import register_advantage_estimator, register_environment

class CellEnv:  # a skyrl-gym environment defined in a cell
    pass

register_environment("cell_env", "__main__:CellEnv")

@register_advantage_estimator("cell_adv")
def cell_adv(token_level_rewards, response_mask, index, config, values=None):
    return token_level_rewards, token_level_rewards
'''


def test_a_plugin_registered_in_a_notebook_cell_is_refused_before_submission(ray_cluster: Any, shell: Any,
                                                                            tmp_path: Path) -> None:
    from skyrl_core.registry import ADVANTAGE_ESTIMATORS, ENVIRONMENTS

    runs = tmp_path / "runs"
    assert shell.run_cell(CELL).success  # a real IPython cell: its code runs in __main__
    try:
        before = _job_ids(ray_cluster)
        env = _refusal(ray_cluster, ["environment.env_class=cell_env", f"run.run_root={runs}"], "cell-env")
        assert env.startswith("environment.env_class: 'cell_env' (CellEnv) is registered from __main__ (a notebook "
                              "cell), which the cluster never runs; put CellEnv and its register call in a module "
                              "and list that module under plugins:"), env
        adv = _refusal(ray_cluster, ["trainer.algorithm.advantage_estimator=cell_adv", f"run.run_root={runs}"],
                       "cell-adv")
        assert adv.startswith("trainer.algorithm.advantage_estimator: 'cell_adv' (cell_adv) is registered from "
                              "__main__"), adv
        assert not runs.exists() and _job_ids(ray_cluster) == before
        assert ENVIRONMENTS.cell_problem("arithmetic") is None  # registered by skyrl_core itself: fine
    finally:
        ENVIRONMENTS.unregister("cell_env")
        ADVANTAGE_ESTIMATORS.unregister("cell_adv")


@pytest.mark.timeout(120)
def test_a_job_that_dies_before_its_first_event_says_why(ray_cluster: Any, shell: Any, tmp_path: Path) -> None:
    from skyrl_core.runs import list_runs

    runs = tmp_path / "runs"  # the shell's run root
    module = ray_cluster.engine_module
    ray_cluster.engine_module = "skyrl_nb_no_such_engine"  # the driver exits at import: nothing is written
    try:
        job = ray_cluster.launch("quickstart", overrides=[f"run.run_root={runs}"], run_id="early-1")
    finally:
        ray_cluster.engine_module = module
    assert job.wait(timeout=90, poll_s=0.3) == "failed"
    state, why = job.status_detail()
    assert state == "failed" and why.startswith("the job ended before the engine recorded anything: Job entrypoint "
                                                "command failed with exit code 1"), why
    assert "No module named skyrl_nb_no_such_engine" in why and "\n" not in why
    status = json.loads((runs / "early-1" / "status.json").read_text())  # written through for list_runs
    assert status["state"] == "failed" and status["error"] == why
    (summary,) = list_runs(runs)
    assert summary.state == "failed" and summary.error == why
    (listed,) = shell.run_line_magic("skyrl", "list")
    assert listed.state == "failed" and listed.error == why
    shell.user_ns["c"] = ray_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'c'")
    assert "state='failed'" in repr(shell.run_line_magic("skyrl", "status early-1"))


class _Ray:
    """Ray's job client for one submission that ended: its JobDetails and its log."""

    def __init__(self, status: str, message: str, log: str = "") -> None:
        self.details = SimpleNamespace(status=status, message=message, start_time=(time.time() - 60) * 1000)
        self.log = log

    def get_job_info(self, submission_id: str) -> Any:
        return self.details

    def get_job_logs(self, submission_id: str) -> str:
        return self.log


RUNTIME_ENV_FAILED = ("runtime_env setup failed: Failed to set up runtime environment.\nTraceback (most recent call "
                      "last):\n  File \"agent.py\", line 3\nRuntimeEnvSetupError: pip install of 'nope' failed\n")


@pytest.mark.parametrize(("ray", "recorded", "state", "why", "written"), [
    # the runtime env could not be set up: Ray's first line and the error line of its traceback
    (("FAILED", RUNTIME_ENV_FAILED), "pending", "failed", "the job ended before the engine recorded anything: "
     "runtime_env setup failed: Failed to set up runtime environment.; last log line: RuntimeEnvSetupError: pip "
     "install of 'nope' failed", True),
    # a driver killed at once: Ray's message has no log, the job's log is asked for
    (("FAILED", "Job entrypoint command failed with exit code -9", "loading\nKilled\n"), "pending", "failed",
     "the job ended before the engine recorded anything: Job entrypoint command failed with exit code -9; "
     "last log line: Killed", True),
    (("STOPPED", ""), "pending", "stopped", "stopped before the engine started", True),
    (("SUCCEEDED", ""), "pending", "failed", "the job ended before the engine recorded anything: the job's command "
     "exited 0 without the engine recording a start (Ray gave no reason)", True),
    # what the engine wrote stands, and an unreadable store says nothing against Ray
    (("FAILED", "Job entrypoint command failed with exit code 2"), "failed", "failed", "ValueError: engine's words",
     False),
    (("SUCCEEDED", ""), None, "succeeded", None, False),
])
def test_an_early_end_is_read_from_ray_and_written_through_once(tmp_path: Path, ray: tuple[str, ...],
                                                                recorded: str | None, state: str, why: str | None,
                                                                written: bool) -> None:
    from skyrl_core.runs import RunWriter
    from skyrl_nb.cluster.base import Cluster
    from skyrl_nb.jobs import Job

    cluster = Cluster("http://127.0.0.1:9", token="t")
    cluster._client_obj = _Ray(*ray)
    run_dir = tmp_path / "r"
    if recorded is not None:
        RunWriter(run_dir).set_status(recorded, error="ValueError: engine's words" if recorded == "failed" else None)
    job = Job(cluster, submission_id="r", run_id="r", run_dir=str(run_dir))
    assert job.status_detail() == (state, why)
    if recorded is not None:
        status = json.loads((run_dir / "status.json").read_text())
        assert (status["state"], status["error"]) == ((state, why) if written else (recorded, status["error"]))
        assert job.status_detail() == (state, why)  # read back the same


def test_a_config_the_engine_refuses_at_start_is_recorded_as_failed(tmp_path: Path) -> None:
    """The engine, handed a config it refuses, writes `failed` and the reason over the notebook's `pending`."""
    from skyrl_core.config import check_config
    from skyrl_nb.cluster.base import Cluster

    run_dir = tmp_path / "runs" / "refused-1"
    Cluster._mark_pending(check_config("quickstart"), str(run_dir))
    env = {**os.environ, "SKYRL_NB_RUN_DIR": str(run_dir)}
    proc = subprocess.run([sys.executable, "-m", "skyrl_engine", "train", "--config", "quickstart",
                           "trainer.no_such_key=1"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "failed", status
    assert status["error"].startswith("the config was refused where the job runs: trainer.no_such_key:"), status
    events = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events] == ["error"]
