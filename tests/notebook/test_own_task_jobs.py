"""Your own task through ``Cluster.launch`` (issue 35) on the session's real local Ray cluster, with the real engine:
a reward function that raises on some samples, kept with those samples and counted; the same with
``reward_errors="fail"``, which fails the job with the function's error in its status and the dashboard's header;
and launches that cannot run (bad data, a function that cannot be called) refused with no run folder and no job.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

QA = [{"question": f"{a}+{b}", "answer": str(a + b)} for a in range(4) for b in range(4)]
MAPPED = {"prompt": "question", "ground_truth": "answer"}
STEPS = 2


def _small(tmp_path: Path, model: str) -> list[str]:
    return [f"trainer.policy.model.path={model}", f"run.run_root={tmp_path / 'runs'}", "data.val_data=[]",
            "trainer.train_batch_size=4", "trainer.policy_mini_batch_size=4", "trainer.micro_train_batch_size_per_gpu=8",
            "generator.n_samples_per_prompt=2", f"trainer.max_training_steps={STEPS}", "trainer.eval_interval=0",
            "trainer.eval_before_train=false", "generator.sampling_params.max_generate_length=3"]


def picky(prompt, completion, ground_truth, **_):
    """Exact match; raises for odd answers (half the rows), as a reward that trips on some data would."""
    if int(ground_truth) % 2:
        raise KeyError(f"no rule for {prompt}")
    return float(completion.strip() == ground_truth)


def _job_ids(cluster: Any) -> set[str]:
    return {j.submission_id for j in cluster.client.list_jobs()}


@pytest.mark.timeout(420)
def test_reward_errors_stay_with_their_samples_or_fail_the_job(ray_cluster: Any, tiny_model_dir: str, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import pandas as pd

    from skyrl_core.config import ConfigError
    from skyrl_nb.dashboard import Dashboard
    from skyrl_widgets.inspector_data import TrajectoryData

    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")  # the real engine, not fake_engine
    small = _small(tmp_path, tiny_model_dir)
    runs = tmp_path / "runs"

    # refused before anything is written or submitted: a missing column, a function that cannot be called
    before = _job_ids(ray_cluster)
    for given in (dict(data=pd.DataFrame(QA), columns={"prompt": "q"}),
                  dict(data=pd.DataFrame(QA), columns=MAPPED, reward=lambda prompt, completion: 1.0)):
        with pytest.raises(ConfigError):
            ray_cluster.launch("quickstart", overrides=small, run_id="refused", **given)
    assert not (runs / "refused").exists() and _job_ids(ray_cluster) == before

    skip = ray_cluster.launch("quickstart", overrides=small, run_id="picky", data=pd.DataFrame(QA), columns=MAPPED,
                              reward=picky)
    fail = ray_cluster.launch("quickstart", overrides=small, run_id="picky-fail", data=pd.DataFrame(QA),
                              columns=MAPPED, reward=picky, reward_errors="fail")
    assert skip.wait(timeout=300, poll_s=1.0) == "succeeded", skip.logs(tail=40)
    rows = skip.run.metrics()
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    for row in rows:
        part = skip.run.trajectories(row["step"])
        odd = part["ground_truth"].astype(int) % 2 == 1
        # the job went on: each odd sample scored 0 with the error's last line; reward/errors counts them
        assert row["reward/errors"] == odd.sum()
        assert (part.loc[odd, "reward_error"] == [f"picky: KeyError: 'no rule for {q}'" for q in
                                                  part.loc[odd, "prompt"].map(_question)]).all()
        assert part.loc[~odd, "reward_error"].isna().all() and (part.loc[odd, "reward"] == 0).all()
        assert row["reward/picky"] == pytest.approx(part["reward/picky"].mean())
    # the inspector shows the message on those samples, and each function's score
    data = TrajectoryData(skip.run_dir)
    shown = [s for g in data.view(STEPS, page_size=50)["groups"] for s in g["samples"]]
    assert {s["reward_error"] for s in shown if s["reward_error"]} and all(s["reward_parts"] == {"picky": s["reward"]}
                                                                          for s in shown if not s["reward_error"])
    assert skip.run.inputs().reward_names() == ["picky"] and "def picky(" in skip.run.inputs().rewards[0]["source"]
    # a restart as a new run trains on the same shipped data and functions (copied into its own folder)
    again = skip.restart_as_new(["trainer.max_training_steps=1"])
    assert again.run_id == "picky-new" and again.wait(timeout=240, poll_s=1.0) == "succeeded", again.logs(tail=30)
    assert again.run.inputs() == skip.run.inputs() and again.run.metrics()[0]["reward/errors"] >= 0

    assert fail.wait(timeout=300, poll_s=1.0) == "failed", fail.logs(tail=40)
    error = fail.run.status()["error"]
    assert "RewardFunctionError: reward function picky: KeyError: 'no rule for" in error and "reward.errors=fail" in error
    assert fail.run.status()["resumable"] is False  # the same data fails again: no Resume
    dash = Dashboard(fail, static=True)
    dash.refresh()
    assert "picky: KeyError" in dash.header()


def _question(prompt: str) -> str:
    """The user's question inside the chat-templated prompt the trajectory keeps."""
    import re

    return re.search(r"(\d\+\d)", prompt).group(1)


ENV_CELL = '''
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_core.registry import register_environment

AGAIN = "Not quite. Try again."

class GuessEnv(BaseTextEnv):
    """Two tries at the sum: a wrong first answer gets a hint and another turn."""

    def __init__(self, env_config=None, extras=None):
        super().__init__()
        self.answer = str((extras or {}).get("reward_spec", {}).get("ground_truth"))
        self.max_turns = 2

    def step(self, action):
        self.turns += 1
        right = action.strip() == self.answer
        if right or self.turns >= self.max_turns:
            return BaseTextEnvStepOutput(observations=[], reward=float(right), done=True, metadata={})
        return BaseTextEnvStepOutput(observations=[{"role": "user", "content": AGAIN}], reward=0.0, done=False,
                                     metadata={})

register_environment("guess_in_a_cell", GuessEnv)
'''


@pytest.mark.timeout(300)
def test_a_multi_turn_environment_class_from_a_cell_travels_with_the_job(
        ray_cluster: Any, tiny_model_dir: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A skyrl-gym BaseTextEnv subclass defined and registered in a cell (``__main__``): shipped by value like a
    reward function, registered with skyrl-gym in the job, and played for two turns."""
    import pandas as pd

    from skyrl_core.registry import ENVIRONMENTS

    monkeypatch.setattr(ray_cluster, "engine_module", "skyrl_engine")
    namespace: dict[str, Any] = {"__name__": "__main__"}
    exec(compile(ENV_CELL, "<ipython-input-3-env>", "exec"), namespace)  # noqa: S102 - a notebook cell's stand-in
    try:
        job = ray_cluster.launch("quickstart", overrides=[*_small(tmp_path, tiny_model_dir), "generator.max_turns=2",
                                                          "environment.env_class=guess_in_a_cell"],
                                 run_id="cell-env", data=pd.DataFrame(QA), columns=MAPPED)
        assert job.wait(timeout=240, poll_s=1.0) == "succeeded", job.logs(tail=40)
    finally:
        ENVIRONMENTS.unregister("guess_in_a_cell")
    part = job.run.trajectories(STEPS)
    assert set(part["env_class"]) == {"guess_in_a_cell"}
    # the class ran in the job: a wrong first answer got the cell's hint as a second turn
    assert part["turns"].map(lambda t: "Not quite. Try again." in str(t)).any()
    shipped = job.run.config()["environment"]["shipped"]
    assert list(shipped) == ["guess_in_a_cell"] and shipped["guess_in_a_cell"].startswith("inputs://env-guess_in_a_cell-")
