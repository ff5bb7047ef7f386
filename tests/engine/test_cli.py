"""The command line: validate exit codes and plug-in environments. Real runs through it: tests/async/test_cli_placements.py
(disaggregated with a critic, one-step async), tests/critic/test_critic_cli.py (kill -9 + resume)."""

from __future__ import annotations

import sys
from pathlib import Path

from skyrl_engine.__main__ import main


def test_validate_exit_codes(capsys, tmp_path):
    assert main(["validate", "--config", "quickstart"]) == 0
    assert main(["validate", "--config", "quickstart", "trainer.lr=3"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("trainer.lr:") and "did you mean 'trainer.policy.optimizer_config.lr'" in err[0]
    assert main(["validate", "--config", "quickstart", "trainer.algorithm.advantage_estimator=grpoo"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith("trainer.algorithm.advantage_estimator:") and "grpo" in err[0]
    code = main(["validate", "--config", "quickstart", "data.train_data=[/nope/train.parquet]",
                 "trainer.policy_mini_batch_size=32"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 2
    assert {line.split(":")[0] for line in err} == {"data.train_data", "trainer.policy_mini_batch_size"}


def test_train_refuses_a_bad_config_before_starting_anything(capsys, tmp_path):
    code = main(["train", "--config", "quickstart", f"run.run_root={tmp_path}", "run.run_id=bad",
                 "trainer.policy_mini_batch_size=32"])
    assert code == 2
    assert "trainer.policy_mini_batch_size" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_validate_lists_every_registered_environment_for_an_unknown_one(capsys, monkeypatch):
    """skyrl-gym's environments, skyrl-nb's and a plug-in's, in the one line, before anything starts."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "plugins"))
    assert main(["validate", "--config", "quickstart", "environment.env_class=no_such_env"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("environment.env_class: 'no_such_env' is not allowed; allowed: ")
    assert all(name in line for name in ("gsm8k", "text2sql", "search", "arithmetic"))
    if "my_skyrl_plugin" not in sys.modules:  # a plug-in's registration lives in its process once imported
        assert "my_echo" not in line
    assert main(["validate", "--config", "quickstart", "plugins=[my_skyrl_plugin]",
                 "environment.env_class=no_such_env"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("environment.env_class:") and "my_echo" in line and "arithmetic" in line
    assert main(["validate", "--config", "quickstart", "plugins=[my_skyrl_plugin]",
                 "environment.env_class=my_echo"]) == 0


def test_a_plugin_environment_scores_rollouts(monkeypatch):
    """The plug-in's environment, registered by name, is what skyrl-gym makes for its rows."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "fixtures" / "plugins"))
    from skyrl_core.registry import load_plugins
    from skyrl_engine.tasks import score_response
    from skyrl_engine.types import PromptRow

    load_plugins(["my_skyrl_plugin"])
    row = PromptRow(prompt=[{"role": "user", "content": "7+1"}], env_class="my_echo", data_source="t",
                    ground_truth=None)
    assert score_response(row, " 7+1 ")[0] == 1.0 and score_response(row, "8")[0] == 0.0
