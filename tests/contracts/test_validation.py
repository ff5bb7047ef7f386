"""The one validation (``config_problems`` / ``check_config``): every field, every phase, launch's rules."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from skyrl_core import config as config_module
from skyrl_core.config import PRESETS, JobConfig, all_keys, check_config, config_problems
from skyrl_core.runs import run_id_problem
from skyrl_engine.__main__ import main


def _lines(*overrides: str, source: str = "quickstart") -> list[str]:
    return config_problems(source, list(overrides))[1]


def _keys_of(kind: type) -> list[str]:
    return [k for k in all_keys() if config_module._scalar_kind(_section_of(k), k.rsplit(".", 1)[-1]) is kind]


def _section_of(key: str) -> type:
    model = JobConfig
    for part in key.split(".")[:-1]:
        model = model.model_fields[part].annotation
    return model


def test_presets_pass_the_one_validation(tmp_path: Path) -> None:
    for name in PRESETS:
        cfg = check_config(name, [f"run.run_root={tmp_path}"])
        assert cfg.problems() == []


def test_every_float_key_refuses_inf_and_nan() -> None:
    floats = [key for key in _keys_of(float) if not key.endswith("adam_betas")]  # a list: its own test
    assert len(floats) > 30 and "trainer.policy.optimizer_config.weight_decay" in floats
    for key in floats:
        for value in (math.inf, -math.inf, math.nan):
            (line,) = config_problems("quickstart", {key: value})[1]
            assert line.startswith(f"{key}: ") and "finite" in line, line


def test_every_int_key_fits_in_64_bits_and_seeds_in_31() -> None:
    ints = _keys_of(int)
    assert "trainer.seed" in ints and len(ints) > 25
    for key in ints:
        (line,) = config_problems("quickstart", {key: 2**64})[1]
        assert line.startswith(f"{key}: 18446744073709551616 is not allowed"), line
    (line,) = _lines("trainer.seed=18446744073709551616")
    assert line.startswith("trainer.seed: 18446744073709551616 is not allowed")
    (line,) = _lines("trainer.seed=2147483648")
    assert "less than or equal to 2147483647" in line


def test_booleans_are_not_numbers_and_numbers_are_not_booleans() -> None:
    assert _lines("trainer.policy.optimizer_config.lr=true") == [
        "trainer.policy.optimizer_config.lr: True is not allowed; it should be a number, not true or false"]
    # the bad key alone is named: its default stands in, and checks reading it are skipped
    assert _lines("trainer.train_batch_size=true") == [
        "trainer.train_batch_size: True is not allowed; it should be a number, not true or false"]
    for value in ("1", "0", "'true'", "2.5"):
        (line,) = _lines(f"trainer.algorithm.use_kl_loss={value}")
        assert line.startswith("trainer.algorithm.use_kl_loss:") and "true or false" in line
    assert check_config("quickstart", ["trainer.algorithm.use_kl_loss=true", "trainer.policy.optimizer_config.lr=1e-3",
                                       "trainer.seed='7'"]).trainer.seed == 7


def test_adam_betas_each_in_zero_to_one() -> None:
    for value in ("[0.9, 1.5]", "[.nan, .nan]", "[0.9, 1.0]", "[-0.1, 0.9]", "[true, 0.9]"):
        (line,) = _lines(f"trainer.policy.optimizer_config.adam_betas={value}")
        assert line.startswith("trainer.policy.optimizer_config.adam_betas:"), line
    check_config("quickstart", ["trainer.policy.optimizer_config.adam_betas=[0, 0.95]"])


def test_problems_of_every_phase_show_in_one_pass(tmp_path: Path) -> None:
    lines = _lines("trainer.sed=3", "trainer.seed=abc", "trainer.policy_mini_batch_size=32",
                   f"data.train_data=[{tmp_path}/nope.parquet]", "trainer.algorithm.advantage_estimator=grpoo",
                   "run.run_root=relative", "environment.env_class=''", "trainer.seed")
    assert [line.split(":")[0] for line in lines] == [
        "trainer.seed",  # the override without '=': a syntax problem
        "trainer.sed", "trainer.seed", "trainer.algorithm.advantage_estimator", "environment.env_class",
        "trainer.policy_mini_batch_size", "data.train_data", "run.run_root"]


def test_a_config_file_that_is_not_utf8_or_not_yaml_is_one_line(tmp_path: Path) -> None:
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("trainer:\n  seed: 3 # café\n".encode("latin-1"))
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer: [1, 2\n")
    assert _lines(source=str(latin)) == [
        f"config: file {str(latin)!r} is not UTF-8 text (byte 0xe9 at offset 24); save it as UTF-8 YAML"]
    assert _lines(source=str(broken)) == [f"config: {str(broken)!r} is not valid YAML at line 2"]
    # the overrides are still judged, the defaults are not
    assert [line.split(":")[0] for line in _lines("trainer.seed=-1", "run.run_root=x", source=str(latin))] == [
        "config", "trainer.seed", "run.run_root"]
    assert _lines(source=str(tmp_path)) == [f"config: {str(tmp_path)!r} is a folder, not a YAML file"]


def test_run_root_run_id_and_ckpt_path_follow_launchs_rules(tmp_path: Path) -> None:
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    for root, fragment in [("relative/runs", "must be an absolute path"), ("''", "must be an absolute path"),
                           ('"/tmp/a\\0b"', "NUL byte"), (str(a_file), "a file, not a folder"),
                           (f"{a_file}/runs", "a file, not a folder")]:
        (line,) = _lines(f"run.run_root={root}")
        assert line.startswith("run.run_root: ") and fragment in line, line
        (line,) = _lines(f"trainer.ckpt_path={root}")
        assert line.startswith("trainer.ckpt_path: ") and fragment in line, line
    for run_id in ("a" * 101, "a/b", "-x", ""):
        assert config_problems("quickstart", {"run.run_id": run_id})[1] == [run_id_problem(run_id)]
        assert config_problems("quickstart", run_id=run_id)[1] == [run_id_problem(run_id)]
    assert check_config("quickstart", [f"run.run_root={tmp_path}/new/deeper"], run_id="a" * 100).run.run_id == "a" * 100
    assert check_config("quickstart", ["run.run_root=~/skyrl-runs"]).run.run_root == "~/skyrl-runs"


def test_every_model_path_is_checked(tmp_path: Path) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    gae = "trainer.algorithm.advantage_estimator=gae"
    (line,) = _lines(gae, "trainer.critic.model.path=/nonexistent")
    assert line.startswith("trainer.critic.model.path: '/nonexistent' is not a local Hugging Face model directory")
    assert _lines("trainer.critic.model.path=/nonexistent") == []  # no critic without gae
    assert _lines(gae, f"trainer.critic.model.path={model}") == []
    assert _lines(gae, "trainer.critic.model.path=builtin://tiny-qwen2") == []  # the policy's own
    assert _lines(gae) == []  # None: a copy of the policy
    (line,) = _lines("trainer.policy.model.path=''")
    assert line.startswith("trainer.policy.model.path: '' is not allowed")


def test_env_class_without_skyrl_gym(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(config_module, "environment_names", lambda: None)
    for bad in ("''", "😀", "a b", '"a\\0b"'):
        (line,) = _lines(f"environment.env_class={bad}")
        assert line.startswith("environment.env_class: ") and "not an environment name" in line
    assert _lines("environment.env_class=my_plugin_env") == []  # only the cluster knows its names


def test_the_cli_prints_every_problem_on_its_own_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["validate", "--config", "quickstart", "trainer.policy.optimizer_config.weight_decay=.inf",
                 "trainer.seed=18446744073709551616", "environment.env_class=nonexistent_env",
                 f"run.run_root={os.devnull}"])
    err = capsys.readouterr().err.splitlines()
    assert code == 2 and [line.split(":")[0] for line in err] == [
        "trainer.policy.optimizer_config.weight_decay", "trainer.seed", "environment.env_class", "run.run_root"]
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"\xff\xfe")
    assert main(["validate", "--config", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("config: file")
