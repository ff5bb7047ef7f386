"""Bad `%skyrl` lines and overrides: each is a one-line UsageError and submits nothing.

Runs through a real IPython shell; the cluster is a spy that records submissions, and starting a
local cluster is made to fail loudly, so "nothing submitted" also means "no cluster started".
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from IPython.core.error import UsageError

# (what is wrong, line, cell body or None, a fragment the message must contain)
BAD: list[tuple[str, str, str | None, str]] = [
    ("no command", "", None, "needs a command"),
    ("unknown command", "lauch", None, "did you mean 'launch'"),
    ("unknown option", "launch --cluster spy --frobnicate", None, "unrecognized arguments"),
    ("override without =", "launch --cluster spy trainer.seed", None, "is not key=value"),
    ("empty key", "launch --cluster spy =3", None, "no key before"),
    ("unknown key", "launch --cluster spy trainer.sed=3", None, "did you mean 'trainer.seed'"),
    ("unknown section", "launch --cluster spy trainr.seed=3", None, "trainr"),
    ("not an integer", "launch --cluster spy trainer.seed=abc", None, "trainer.seed"),
    ("below minimum", "launch --cluster spy trainer.train_batch_size=0", None, "trainer.train_batch_size"),
    ("bad choice", "launch --cluster spy trainer.algorithm.advantage_estimator=grpoo", None, "did you mean 'grpo'"),
    ("bad literal", "launch --cluster spy generator.inference_engine.backend=tpu", None, "backend"),
    ("unknown preset", "launch --cluster spy --preset quikstart", None, "quikstart"),
    ("missing YAML file", "launch --cluster spy --preset /nope/run.yaml", None, "does not exist"),
    ("cross-field: mini-batch > batch", "launch --cluster spy trainer.policy_mini_batch_size=64", None,
     "policy_mini_batch_size"),
    ("group of one for grpo", "launch --cluster spy generator.n_samples_per_prompt=1", None, "n_samples_per_prompt"),
    ("missing data file", "launch --cluster spy data.train_data=[/nope/train.parquet]", None, "does not exist"),
    ("missing model dir", "launch --cluster spy trainer.policy.model.path=/nope/model", None, "model.path"),
    ("relative run root", "launch --cluster spy run.run_root=relative/runs", None, "absolute path"),
    ("bad run id", "launch --cluster spy run.run_id=a/b", None, "run.run_id"),
    ("bad --run-id", "launch --cluster spy --run-id bad:id", None, "run.run_id"),
    ("no such cluster variable", "launch --cluster nosuchvar", None, "no such variable"),
    ("cluster variable of the wrong type", "launch --cluster not_a_cluster", None, "not a Cluster"),
    ("cell body not YAML", "launch --cluster spy", "trainer: [1, 2", "not valid YAML"),
    ("cell body not a mapping", "launch --cluster spy", "- a\n- b", "must be a YAML mapping"),
    ("cell body unknown key", "launch --cluster spy", "trainer:\n  sed: 3", "trainer.sed"),
    ("cell body bad value", "launch --cluster spy", "trainer:\n  algorithm:\n    policy_loss_type: ppo",
     "policy_loss_type"),
    ("cell body with a non-launch command", "status", "trainer: {seed: 1}", "only `launch` takes a cell body"),
    ("logs without run", "logs", None, "needs exactly one run id"),
    ("status with two runs", "status a b", None, "too many arguments"),
    ("negative --tail", "logs some-run --tail -3", None, "--tail"),
    ("--tail not a number", "logs some-run --tail many", None, "invalid int value"),
    ("--preset on a non-launch command", "stop some-run --preset quickstart", None, "only go with launch"),
    ("unknown run for logs", "logs no-such-run", None, "no job for run"),
    ("unknown run for dashboard", "dashboard no-such-run", None, "no run 'no-such-run'"),
    # absurd sizes and depths (issue 33): were `ValueError: Exceeds the limit` and `RecursionError` tracebacks
    ("a 5000-digit value", "launch --cluster spy trainer.seed=" + "1" * 5000, None, "at most 2**63-1"),
    ("cell body nested 3000 deep", "launch --cluster spy", "trainer: " + "{a: " * 3000 + "1" + "}" * 3000,
     "nests deeper than 32 levels"),
    ("cell body list nested 3000 deep", "launch --cluster spy", "data:\n  train_data: " + "[" * 3000 + "]" * 3000,
     "nests deeper than 32 levels"),
    ("a line over 1 MiB", "launch --cluster spy data.train_data=" + "x" * (1 << 20), None, "characters long; at most"),
    ("a cell body over 1 MiB", "launch --cluster spy", "# padding\n" * 110_000, "characters long; at most"),
    # files are judged before a local head is started (`guarded` fails the test if one is)
    ("missing data file, local cluster", "launch data.train_data=[/nope/train.parquet]", None, "does not exist"),
    ("a folder as data, local cluster", "launch data.train_data=[/tmp]", None, "'/tmp' is a folder, not a"),
    # run paths stay inside the run root unless absolute
    *((f"{command} outside the run root", f"{command} ../outside/run{extra}", None,
       "leads outside the run root") for command, extra in (("status", ""), ("dashboard", ""), ("inspect", ""),
                                                             ("export", " /tmp/skyrl-h7-model"))),
]


@pytest.fixture()
def guarded(shell: Any, spy_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The shell with a spy cluster in `spy`, and `local()` forbidden."""
    import skyrl_nb.cluster.local as local_mod

    def no_local(**kwargs: Any) -> None:
        raise AssertionError("a bad line must not start a local cluster")

    monkeypatch.setattr(local_mod, "local", no_local)
    shell.user_ns["spy"] = spy_cluster
    shell.user_ns["not_a_cluster"] = 42
    return shell


@pytest.mark.parametrize("what,line,cell,fragment", BAD, ids=[b[0] for b in BAD])
def test_bad_line_is_one_line_usage_error(guarded: Any, spy_cluster: Any, tmp_path: Path,
                                          what: str, line: str, cell: str | None, fragment: str) -> None:
    with pytest.raises(UsageError) as info:
        if cell is None:
            guarded.run_line_magic("skyrl", line)
        else:
            guarded.run_cell_magic("skyrl", line, cell)
    message = str(info.value)
    assert "\n" not in message, f"{what}: message spans lines: {message!r}"
    assert fragment in message, f"{what}: {message!r} lacks {fragment!r}"
    assert spy_cluster.client.submitted == [], f"{what}: something was submitted"
    runs = tmp_path / "runs"
    assert not runs.exists() or not any(runs.iterdir()), f"{what}: a run dir was created"


def test_at_least_twenty_kinds() -> None:
    assert len({b[0] for b in BAD}) >= 20


def test_existing_run_id_is_refused(guarded: Any, spy_cluster: Any, tmp_path: Path) -> None:
    guarded.run_line_magic("skyrl", "launch --cluster spy --run-id taken --no-dashboard")
    assert len(spy_cluster.client.submitted) == 1
    with pytest.raises(UsageError, match="already exists"):
        guarded.run_line_magic("skyrl", "launch --cluster spy --run-id taken")
    assert len(spy_cluster.client.submitted) == 1


def test_good_launch_reaches_the_spy(guarded: Any, spy_cluster: Any, tmp_path: Path) -> None:
    job = guarded.run_cell_magic("skyrl", "launch --cluster spy --run-id good trainer.seed=7",
                                 "trainer:\n  max_training_steps: 3\ngenerator.n_samples_per_prompt: 16\n")
    (sub,) = spy_cluster.client.submitted
    assert sub["submission_id"] == "good" and job.run_id == "good"
    assert sub["entrypoint"].endswith(("-m fake_engine train --config env:SKYRL_NB_CONFIG",
                                       "-m skyrl_engine train --config env:SKYRL_NB_CONFIG"))
    from skyrl_core.config import load_config

    cfg = load_config(yaml.safe_load(sub["runtime_env"]["env_vars"]["SKYRL_NB_CONFIG"]))
    assert cfg.trainer.seed == 7 and cfg.trainer.max_training_steps == 3
    assert cfg.generator.n_samples_per_prompt == 16
    assert cfg.run.run_root == str(tmp_path / "runs")
    assert (tmp_path / "runs" / "good" / "status.json").exists()


def test_config_settings(shell: Any, tmp_path: Path) -> None:
    shell.run_line_magic("config", "SkyrlMagics.preset = 'dapo'")
    shell.run_line_magic("config", "SkyrlMagics.log_tail = 7")
    magics = shell.magics_manager.registry["SkyrlMagics"]
    assert magics.preset == "dapo" and magics.log_tail == 7
    shell.run_line_magic("config", "SkyrlMagics.preset = 'quickstart'")


def test_a_launch_refused_for_its_files_starts_no_cluster(shell: Any, spy_cluster: Any, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The local cluster's factory is a recorder: a config it cannot run never calls it; a good one does."""
    import skyrl_nb.cluster.local as local_mod

    started: list[dict[str, Any]] = []

    def recording_local(**kwargs: Any) -> Any:
        started.append(kwargs)
        return spy_cluster

    monkeypatch.setattr(local_mod, "local", recording_local)
    (tmp_path / "data").mkdir()
    for bad in ("data.train_data=[/nope/train.parquet]", f"data.val_data=[{tmp_path / 'data'}]",
                "trainer.policy.model.path=/nope/model"):
        with pytest.raises(UsageError):
            shell.run_line_magic("skyrl", f"launch {bad}")
    assert started == [] and spy_cluster.client.submitted == []
    shell.user_ns["seed"] = 7  # IPython's $name expansion, which the magic now does itself (after the size check)
    shell.run_line_magic("skyrl", "launch --run-id fine --no-dashboard trainer.seed=$seed")
    assert len(started) == 1 and len(spy_cluster.client.submitted) == 1
    assert "seed: 7" in spy_cluster.client.submitted[0]["runtime_env"]["env_vars"]["SKYRL_NB_CONFIG"]


def test_run_paths_stay_inside_the_run_root(shell: Any, tmp_path: Path) -> None:
    """A run outside the root, reached through '..' or a symlink inside it, is refused; by absolute path it opens."""
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunWriter

    outside = tmp_path / "outside" / "run"
    writer = RunWriter(str(outside))
    writer.write_config(load_config("quickstart"))
    writer.set_status("succeeded", step=1, total_steps=1)
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "link").symlink_to(outside)
    (runs / "loop").symlink_to(runs / "loop")
    for command in ("status", "dashboard", "inspect", "export"):
        extra = " /tmp/skyrl-h7-model" if command == "export" else ""
        for run, how in (("link", "a symlink"), ("../outside/run", "'..'"), ("sub/../../outside/run", "'..'")):
            with pytest.raises(UsageError) as info:
                shell.run_line_magic("skyrl", f"{command} {run}{extra}")
            assert str(info.value) == (f"%skyrl: run {run!r} leads outside the run root {runs} through {how}; give "
                                       "a run id under it, or an absolute path"), str(info.value)
        with pytest.raises(UsageError, match="loop"):  # a loop inside the root: not a run, named (no traceback)
            shell.run_line_magic("skyrl", f"{command} loop{extra}")
        with pytest.raises(UsageError, match="NUL byte"):  # os.path.realpath would raise ValueError
            shell.run_line_magic("skyrl", f"{command} 'a\x00b'{extra}")
    assert not os.path.exists("/tmp/skyrl-h7-model")
    assert shell.run_line_magic("skyrl", f"status {outside}").run_id == "run"  # absolute: the user's choice
