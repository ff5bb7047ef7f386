"""What a launch sends to a cluster that shares no disk with the notebook: the resolved config inside the
submission (runtime env), the engine's code as Ray py_modules (or the cluster's own, or an image), and
nothing staged on this disk. The submissions are recorded by a spy client, not sent (the real thing runs
in tests/remote/test_remote_cluster.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from skyrl_core.config import ConfigError, load_config
from skyrl_core.submission import CONFIG_ENV, MAX_CONFIG_BYTES, config_source, pack_config


@pytest.fixture()
def remote_spy(spy_cluster: Any) -> Any:
    """The spy as a cluster elsewhere: engine code shipped with each job (it still sees this disk)."""
    spy_cluster.code = "ship"
    return spy_cluster


def test_config_and_code_travel_with_the_submission(remote_spy: Any, tmp_path: Path) -> None:
    job = remote_spy.launch("quickstart", overrides=[f"run.run_root={tmp_path}", "trainer.seed=5"], run_id="travel")
    (sub,) = remote_spy.client.submitted
    assert sub["entrypoint"].endswith("train --config env:SKYRL_NB_CONFIG")
    env = sub["runtime_env"]
    cfg = load_config(yaml.safe_load(env["env_vars"][CONFIG_ENV]))
    assert cfg.trainer.seed == 5 and cfg.run.run_id == "travel" and cfg.run.run_root == str(tmp_path)
    shipped = {Path(p).name: p for p in env["py_modules"]}
    assert shipped.keys() == {"skyrl_core", "skyrl_engine"}
    assert (Path(shipped["skyrl_engine"]) / "trainer.py").is_file()
    assert "__pycache__" in env["excludes"]
    assert not (tmp_path / "travel" / "launch").exists()  # nothing staged for the job on this disk
    assert job.code.mode == "ship"


def test_image_and_installed_code(spy_cluster: Any, tmp_path: Path) -> None:
    spy_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id="img", image="me/skyrl-nb:0.1")
    spy_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id="own", code="installed")
    with_image, installed = (s["runtime_env"] for s in spy_cluster.client.submitted)
    assert with_image["image_uri"] == "me/skyrl-nb:0.1" and "py_modules" not in with_image
    assert "py_modules" not in installed and "image_uri" not in installed


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"code": "wheel"}, "code: 'wheel' is not allowed; allowed: ship"),
    ({"image": " "}, "image: ' ' is not a container image name"),
    ({"code": "ship", "image": "x:1"}, "code: 'ship' together with image='x:1'"),
])
def test_bad_code_choice_is_one_line_before_anything(spy_cluster: Any, tmp_path: Path, kwargs: dict[str, Any],
                                                     expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        spy_cluster.launch("quickstart", overrides=[f"run.run_root={tmp_path}"], run_id="bad", **kwargs)
    (line,) = err.value.problems
    assert line.startswith(expected)
    assert spy_cluster.client.submitted == [] and not (tmp_path / "bad").exists()


def test_a_config_too_large_to_travel_is_refused(spy_cluster: Any, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"at most 96 KiB travel with a submission"):
        pack_config("x" * (MAX_CONFIG_BYTES + 1))
    # ~110 KiB of data paths (set past validation, which would look for the files)
    cfg = load_config("quickstart", overrides=[f"run.run_root={tmp_path}", "run.run_id=big"]).model_copy(deep=True)
    cfg.data.train_data = [f"/data/part-{i:05d}-{'x' * 60}.parquet" for i in range(1600)]
    with pytest.raises(ConfigError) as err:
        spy_cluster._submit(cfg, submission_id="big", attempt=0, runtime_env=None, code=spy_cluster.engine_code())
    (line,) = err.value.problems
    assert line.startswith("config: the resolved config is") and "KiB of YAML" in line
    assert spy_cluster.client.submitted == [] and not (tmp_path / "big" / "status.json").exists()


def test_config_source_reads_the_variable() -> None:
    assert config_source("quickstart") == "quickstart"
    assert config_source("env:X", {"X": "trainer: {seed: 4}\n"}) == {"trainer": {"seed": 4}}
    with pytest.raises(ValueError, match="names the environment variable NOPE, which is not set"):
        config_source("env:NOPE", {})
    with pytest.raises(ValueError, match="does not hold a YAML mapping"):
        config_source("env:X", {"X": "- a\n"})


def test_engine_cli_reads_the_config_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from skyrl_engine.__main__ import main

    monkeypatch.setenv(CONFIG_ENV, load_config("quickstart", ["trainer.seed=9"]).to_yaml())
    assert main(["validate", "--config", f"env:{CONFIG_ENV}"]) == 0
    monkeypatch.delenv(CONFIG_ENV)
    assert main(["validate", "--config", f"env:{CONFIG_ENV}"]) == 2
    assert "--config: 'env:SKYRL_NB_CONFIG' names the environment variable" in capsys.readouterr().err


def test_resume_takes_the_config_from_rays_job_info(remote_spy: Any, tmp_path: Path) -> None:
    """No file on this disk: the resume reads the config the job was submitted with back from Ray."""
    import types

    job = remote_spy.launch("quickstart", overrides=[f"run.run_root={tmp_path}", "trainer.seed=11"], run_id="res")
    (sub,) = remote_spy.client.submitted
    (tmp_path / "res" / "config.yaml").unlink()  # not needed, and gone
    info = types.SimpleNamespace(status="STOPPED", runtime_env=sub["runtime_env"], message="", start_time=0)
    remote_spy.client.get_job_info = lambda submission_id: info
    resumed = job.resume()
    cfg = load_config(yaml.safe_load(remote_spy.client.submitted[1]["runtime_env"]["env_vars"][CONFIG_ENV]))
    assert resumed.submission_id == "res-r1" and cfg.trainer.seed == 11 and cfg.trainer.resume_mode == "latest"
    assert {Path(p).name for p in remote_spy.client.submitted[1]["runtime_env"]["py_modules"]} == \
        {"skyrl_core", "skyrl_engine"}


def test_studio_default_run_root_is_sagemakers_bucket(s3: Any, spy_cluster: Any, monkeypatch: pytest.MonkeyPatch,
                                                      tmp_path: Path) -> None:
    """In Studio, a cluster elsewhere and no run root given: s3://<SageMaker default bucket>/skyrl-runs, through
    the SageMaker SDK's session (its STS and S3 calls answered by the local moto server)."""
    from skyrl_core.runs import RunReader

    session_helper = pytest.importorskip("sagemaker.core.helper.session_helper")

    monkeypatch.setenv("SKYRL_NB_STUDIO", "1")
    # the SDK names STS's regional endpoint itself: point it at the local server (the account id for the bucket)
    monkeypatch.setattr(session_helper, "sts_regional_endpoint", lambda region: s3.endpoint)
    monkeypatch.setenv("HOME", str(tmp_path))  # the default ~/skyrl-runs is not the user's
    spy_cluster.shared_paths = ()  # a cluster elsewhere
    plan_cfg, line = spy_cluster.run_store(load_config("quickstart"))
    assert plan_cfg.run.run_root == "s3://sagemaker-us-east-1-123456789012/skyrl-runs"
    assert "SageMaker's default bucket: no run root was given" in line
    job = spy_cluster.launch("quickstart", run_id="in-studio")
    assert job.run_dir == "s3://sagemaker-us-east-1-123456789012/skyrl-runs/in-studio"
    assert RunReader(job.run_dir).status()["state"] == "pending"  # written there before submitting
    assert not (tmp_path / "skyrl-runs").exists()
