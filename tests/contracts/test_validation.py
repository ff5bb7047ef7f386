"""The one validation (``config_problems`` / ``check_config``): every field, every phase, launch's rules."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest

from skyrl_core import checks as checks_module
from skyrl_core import keys as keys_module
from skyrl_core.config import PRESETS, JobConfig, all_keys, check_config, config_problems
from skyrl_core.runs import run_id_problem
from skyrl_engine.__main__ import main


def _lines(*overrides: str, source: str = "quickstart") -> list[str]:
    return config_problems(source, list(overrides))[1]


def _keys_of(kind: type) -> list[str]:
    return [k for k in all_keys() if keys_module._scalar_kind(_section_of(k), k.rsplit(".", 1)[-1]) is kind]


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
    monkeypatch.setattr(checks_module, "environment_names", lambda: None)
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


def test_validation_never_changes_its_input(tmp_path: Path) -> None:
    """Every public entry gets a nested source and a nested override with bad keys and values: it must leave both
    as they were, and a second validation must find the same problems (a dropped bad key must not vanish)."""
    import copy

    from skyrl_core.config import ConfigError, as_config, load_config
    from skyrl_nb.cluster.base import Cluster, prepare_config
    from skyrl_nb.form import ConfigForm

    source = copy.deepcopy(PRESETS["quickstart"]) | {"run": {"run_root": str(tmp_path)}}
    overrides = {"trainer": {"seed": -1, "sed": 3, "async_one_step": True, "placement": {"colocate_all": False}},
                 "data.train_data": [5], "generator": {"sampling_params": {"top_p": 2}}}
    source_before, overrides_before = copy.deepcopy(source), copy.deepcopy(overrides)
    expected = ["trainer.sed", "trainer.seed", "generator.sampling_params.top_p", "data.train_data"]

    def refused(call) -> list[str]:
        with pytest.raises(ConfigError) as err:
            call()
        return sorted(line.split(":")[0] for line in err.value.problems)

    entries = {
        "load_config": lambda: load_config(source, overrides),
        "check_config": lambda: check_config(source, overrides),
        "config_problems": lambda: (_ for _ in ()).throw(ConfigError(config_problems(source, overrides)[1])),
        "prepare_config": lambda: prepare_config(source, overrides=overrides),
        "Cluster.plan": lambda: Cluster("http://127.0.0.1:9", name="none").plan(source, overrides=overrides),
    }
    for name, call in entries.items():
        first, second = refused(call), refused(call)
        assert first == second == sorted(expected), (name, first, second)
        assert (source, overrides) == (source_before, overrides_before), f"{name} changed its input"
    # a good nested override merges into its section (the preset's other trainer keys stay) and stays as given
    good = {"trainer": {"seed": 7, "policy": {"optimizer_config": {"lr": 1e-3}}}}
    good_before = copy.deepcopy(good)
    cfg = check_config("quickstart", good)
    assert (cfg.trainer.seed, cfg.trainer.policy.optimizer_config.lr, cfg.trainer.train_batch_size) == (7, 1e-3, 16)
    assert good == good_before
    # JobConfig from a dict (pydantic) and as_config, with the form's validation on top
    JobConfig.model_validate(source)
    JobConfig(**source)
    as_config(source)
    form = ConfigForm(source)  # type: ignore[arg-type]
    assert form.validate() == form.validate() == []
    assert source == source_before


# (override that sets a key one mode reads, overrides that turn that mode off, ... that turn it on); every rule of
# config._MODE_KEYS has a row (checked below), so a new rule comes with its test
_OPC = "trainer.algorithm.off_policy_correction"
ORPHANS = [
    (f"{_OPC}.token_tis_ratio_clip_high=3", [], [f"{_OPC}.tis_ratio_type=token"]),
    (f"{_OPC}.sequence_tis_ratio_clip_high=3", [], [f"{_OPC}.tis_ratio_type=sequence"]),
    (f"{_OPC}.geo_mask_low=0.9", [], [f"{_OPC}.sequence_mask_metric=geometric"]),
    (f"{_OPC}.geo_mask_high=1.1", [], [f"{_OPC}.sequence_mask_metric=geometric"]),
    (f"{_OPC}.product_mask_low=0.4", [], [f"{_OPC}.sequence_mask_metric=product"]),
    (f"{_OPC}.product_mask_high=3", [], [f"{_OPC}.sequence_mask_metric=product"]),
    (f"{_OPC}.token_mask_is_threshold_low=0.5", [], [f"{_OPC}.token_mask_is_threshold_high=2"]),
    (f"{_OPC}.token_mask_is_threshold_high=2", [], [f"{_OPC}.token_mask_is_threshold_low=0.5"]),
    ("trainer.algorithm.dynamic_sampling.max_sample_batches=3", [], ["trainer.algorithm.dynamic_sampling.type=filter"]),
    ("trainer.algorithm.dynamic_sampling.min_replace_ratio=0.5", ["trainer.algorithm.dynamic_sampling.type=filter"],
     ["trainer.algorithm.dynamic_sampling.type=replace"]),
    ("trainer.algorithm.overlong_buffer.penalty_factor=0.5", [], ["trainer.algorithm.overlong_buffer.len=2"]),
    ("trainer.algorithm.kl_loss_coef=0.01", [], ["trainer.algorithm.use_kl_loss=true"]),
    ("trainer.algorithm.kl_estimator_type=k1", [], ["trainer.algorithm.use_kl_in_reward=true"]),
    ("trainer.algorithm.kl_ctrl.type=adaptive", [], ["trainer.algorithm.use_kl_in_reward=true"]),
    ("trainer.algorithm.kl_ctrl.kl_target=0.2", [], ["trainer.algorithm.use_kl_in_reward=true"]),
    ("trainer.algorithm.kl_ctrl.horizon=500", [], ["trainer.algorithm.use_kl_in_reward=true"]),
    ("trainer.algorithm.entropy_loss_coef=0.5", [], ["trainer.algorithm.use_entropy_loss=true"]),
    ("trainer.fully_async.max_staleness_steps=2", [],
     ["trainer.fully_async.enabled=true", "trainer.placement.colocate_all=false"]),
    *((f"trainer.{role}.model.lora.{setting}", [], [f"trainer.{role}.model.lora.rank=8"])
      for role in ("policy", "critic")
      for setting in ("alpha=32", "dropout=0.05", "target_modules=[q_proj]", "exclude_modules=lm_head",
                      "init_method=gaussian")),
    *((f"trainer.{role}.optimizer_config.num_warmup_steps=3", [f"trainer.{role}.optimizer_config.scheduler=constant"],
       [f"trainer.{role}.optimizer_config.scheduler=cosine"]) for role in ("policy", "critic")),
]


def test_orphan_and_contradicting_keys_are_refused() -> None:
    assert {row[0].split("=")[0] for row in ORPHANS} == {rule[0] for rule in checks_module._MODE_KEYS}
    for setting, off, on in ORPHANS:
        key = setting.split("=")[0]
        (line,) = _lines(setting, *off)
        assert line.startswith(f"{key}: ") and " is ignored unless " in line and "its default" in line, line
        assert _lines(setting, *on) == [], setting  # with its mode on, the key is read: fine
        assert _lines(*off) == [], off  # at its default the key says nothing: a saved config holds every key
    # the ticket's case: the token mask's low end alone was silently ignored
    (line,) = _lines(f"{_OPC}.token_mask_is_threshold_low=0.5")
    assert line.startswith(f"{_OPC}.token_mask_is_threshold_low: 0.5 is ignored unless {_OPC}.token_mask_is_"
                           "threshold_high is set too")
    # an inverted band is named once, as inverted, not also as an orphan
    assert [line.split(":")[0] for line in _lines(f"{_OPC}.product_mask_low=3")] == [f"{_OPC}.product_mask_low"]
    # two schedules at once: refused, not "fully async wins"
    both = ["trainer.async_one_step=true", "trainer.fully_async.enabled=true", "trainer.placement.colocate_all=false"]
    assert _lines(*both) == ["trainer.fully_async.enabled: true is not allowed together with trainer.async_one_step="
                             "true (two schedules at once); allowed: one of them (fully async with "
                             "max_staleness_steps=1 is one-step)"]
    for one in both[:2]:
        assert _lines(one, both[2]) == []


def test_bytes_are_neither_text_nor_numbers() -> None:
    cases = {"trainer.seed": b"3", "trainer.policy.optimizer_config.lr": bytearray(b"0.1"),
             "run.run_id": b"abc", "data.train_data": [b"builtin://arithmetic/train"],
             "trainer.algorithm.use_kl_loss": memoryview(b"1")}
    for key, value in cases.items():
        (line,) = config_problems("quickstart", {key: value})[1]
        assert line.startswith(f"{key}: ") and line.endswith("it should be text or a number, not bytes"), line
    (line,) = _lines("trainer.seed=!!binary Mw==")  # YAML's binary tag makes bytes too
    assert line.startswith("trainer.seed: b'3' is not allowed")
    assert check_config("quickstart", {"trainer.seed": "3"}).trainer.seed == 3  # text still reads as a number


def test_config_files_that_are_not_regular_files_or_too_big_are_one_line(tmp_path: Path) -> None:
    import time

    fifo, loop, dangling, big = tmp_path / "fifo.yaml", tmp_path / "loop.yaml", tmp_path / "gone.yaml", tmp_path / "big.yaml"
    os.mkfifo(fifo)  # opening it would block until a writer came
    loop.symlink_to(loop)
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    big.write_bytes(b"trainer:\n  seed: 3\n" + b"# padding\n" * 200_000)  # 2 MiB: parsing 60 MB took 24 s
    folder = tmp_path / "data"
    folder.mkdir()
    started = time.perf_counter()
    expected = {
        "/dev/zero": "config: '/dev/zero' is a device, not a regular file; give a YAML file",
        str(fifo): f"config: {str(fifo)!r} is a FIFO (named pipe), not a regular file; give a YAML file",
        str(loop): f"config: {str(loop)!r} is a symlink loop, not a YAML file",
        str(dangling): f"config: {str(dangling)!r} is a symlink to nothing (its target does not exist), not a YAML file",
        str(big): f"config: file {str(big)!r} is 1.9 MiB; a config file is at most 1.0 MiB (a real one is a few KiB)",
    }
    for source, line in expected.items():
        assert _lines(source=source) == [line]
    assert time.perf_counter() - started < 2
    # the same rule for data files: a folder is named as one, with what is expected
    assert _lines(f"data.train_data=[{folder}]") == [
        f"data.train_data: {str(folder)!r} is a folder, not a .parquet/.jsonl/.json file"]
    (line,) = _lines(f"data.val_data=[{fifo}]")
    assert line == f"data.val_data: {str(fifo)!r} is a FIFO (named pipe), not a regular file; give a .parquet/.jsonl/.json file"


def test_absurd_sizes_and_depths_are_one_line(tmp_path: Path) -> None:
    deep = tmp_path / "deep.yaml"
    deep.write_text("{a: " * 3000 + "1" + "}" * 3000)
    assert _lines(source=str(deep)) == [f"config: {str(deep)!r} nests deeper than 32 levels (a config needs 6)"]
    nested: dict = {}
    node = nested
    for _ in range(3000):  # deeper than Python's recursion limit
        node["a"] = {}
        node = node["a"]
    assert config_problems(nested)[1] == ["config: the dict nests deeper than 32 levels; a config needs 6"]
    assert config_problems("quickstart", {"trainer.policy.fsdp_config.wrap_policy": nested})[1] == [
        "trainer.policy.fsdp_config.wrap_policy: the value nests deeper than 32 levels; a config needs 6"]
    cycle: list = []
    cycle.append(cycle)
    (line,) = config_problems("quickstart", {"data.train_data": cycle})[1]
    assert line.startswith("data.train_data: the value nests deeper")
    digits = "1" * 5000  # Python refuses to read ints over 4300 digits ("Exceeds the limit")
    (line,) = _lines(f"trainer.seed={digits}")
    assert line.startswith("trainer.seed: '1111") and line.endswith("it should be at most 2**63-1 (it must fit in 64 bits)")
    huge = tmp_path / "huge_int.yaml"
    huge.write_text(f"trainer:\n  seed: {digits}\n")
    assert _lines(source=str(huge)) == [f"config: {str(huge)!r} holds a number too large to read"]
    from skyrl_core.config import ConfigError, load_config

    for source in (str(deep), str(huge), nested):  # load_config, the Python API's door, says the same
        with pytest.raises(ConfigError) as err:
            load_config(source)
        assert len(err.value.problems) == 1 and err.value.problems[0].startswith("config: ")
    (line,) = _lines("data.train_data=" + "x" * (2 << 20))
    assert line == "data.train_data: a value of 2.0 MiB is not allowed; one override's value is at most 1.0 MiB"
