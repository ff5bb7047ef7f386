"""`%skyrl` through a real IPython shell against the session's real Ray cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


@pytest.mark.slow
def test_magics_end_to_end(shell: Any, ray_cluster: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shell.user_ns["c"] = ray_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'c'")
    job = shell.run_cell_magic("skyrl", "launch --run-id mg-1 --wait",
                               "trainer:\n  max_training_steps: 3\n")
    assert job.run_id == "mg-1" and job.status() == "succeeded"
    assert shell.run_line_magic("skyrl", "status mg-1") is job
    assert shell.run_line_magic("skyrl", "status") is job  # the last run
    shell.run_line_magic("skyrl", "logs mg-1 --tail 1")
    assert capsys.readouterr().out.strip().startswith("step 3 reward")
    runs = shell.run_line_magic("skyrl", "list")
    assert [r.run_id for r in runs] == ["mg-1"] and runs[0].state == "succeeded"
    dash = shell.run_line_magic("skyrl", "dashboard mg-1")
    dash.refresh()
    assert dash.points == 3 and dash.finished
    # stop / resume through the magics, on a longer run
    job2 = shell.run_line_magic("skyrl", "launch --run-id mg-2 trainer.max_training_steps=200")
    import time

    deadline = time.time() + 120
    while time.time() < deadline and len(job2.run.metrics()) < 2:
        time.sleep(0.5)
    shell.run_line_magic("skyrl", "stop mg-2")
    assert "stop requested" in capsys.readouterr().out
    assert job2.wait(timeout=60) == "stopped"
    resumed = shell.run_line_magic("skyrl", "resume mg-2 --no-dashboard")
    assert resumed.submission_id == "mg-2-r1"
    resumed.stop()
    resumed.wait(timeout=60)
    # A run only on disk (not launched in this session) still opens.
    shell.magics_manager.registry["SkyrlMagics"].jobs.clear()
    run = shell.run_line_magic("skyrl", "status mg-1")
    assert run is not None


def test_launch_magic_takes_data_and_rewards_from_the_notebook(shell: Any, ray_cluster: Any) -> None:
    """``%%skyrl launch --data df --reward exact,bonus:0.2``: names looked up in the user's namespace, shipped
    with the job (fake engine: what reaches the cluster is checked, not the training); a name that is no
    variable is one line before anything starts."""
    import pandas as pd
    from IPython.core.error import UsageError

    shell.user_ns["c"] = ray_cluster
    shell.run_line_magic("config", "SkyrlMagics.cluster = 'c'")
    shell.run_cell("import pandas as pd\n"
                   "df = pd.DataFrame({'question': ['1+1', '2+2'], 'answer': ['2', '4']})\n"
                   "def exact(prompt, completion, ground_truth, **_):\n"
                   "    return float(completion.strip() == ground_truth)\n"
                   "def bonus(prompts, completions, **_):\n"
                   "    return [0.5 for _ in completions]\n")
    assert isinstance(shell.user_ns["df"], pd.DataFrame)
    with pytest.raises(UsageError, match="--reward 'nope' is no variable in this notebook"):
        shell.run_line_magic("skyrl", "launch --run-id mg-own-bad --data df --reward nope")
    job = shell.run_cell_magic("skyrl", "launch --run-id mg-own --wait --data df "
                               "--columns prompt=question,ground_truth=answer --reward exact,bonus:0.2",
                               "trainer:\n  max_training_steps: 1\n")
    assert job.status() == "succeeded"
    inputs = job.run.inputs()
    assert inputs.sources() == [f"a pandas.DataFrame, 2 rows, sha256 {inputs.data['train'][0]['sha256']}"]
    assert [(r["name"], r["weight"]) for r in inputs.rewards] == [("exact", 1.0), ("bonus", 0.2)]
    assert "def bonus(prompts, completions, **_):" in inputs.rewards[1]["source"]
    config = job.run.config()
    assert config["data"]["columns"] == {"prompt": "question", "ground_truth": "answer"}
    assert [f["name"] for f in config["reward"]["functions"]] == ["exact", "bonus"]
