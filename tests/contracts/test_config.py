"""The job config: loading, overrides, and one-line problems that name the key."""

from __future__ import annotations

import pytest

from skyrl_core.config import ConfigError, JobConfig, all_keys, load_config, preset


def _problems(source="quickstart", overrides=()):
    with pytest.raises(ConfigError) as info:
        load_config(source, list(overrides)).check()
    return info.value.problems


def test_defaults_follow_skyrl():
    cfg = JobConfig()
    assert cfg.trainer.algorithm.advantage_estimator == "grpo"
    assert cfg.trainer.algorithm.kl_estimator_type == "k3"
    assert cfg.trainer.algorithm.eps_clip_low == 0.2 and cfg.trainer.algorithm.clip_ratio_c == 3.0
    assert cfg.trainer.policy.optimizer_config.lr == 1e-6
    assert cfg.trainer.train_batch_size == 1024 and cfg.trainer.policy_mini_batch_size == 256
    assert cfg.generator.n_samples_per_prompt == 5
    assert cfg.generator.sampling_params.top_k == -1
    assert cfg.trainer.seed == 42 and cfg.trainer.ckpt_interval == 10


def test_quickstart_preset_is_valid_and_overridable():
    cfg = load_config("quickstart", ["trainer.max_training_steps=7", "generator.sampling_params.temperature=0.5",
                                     "data.val_data=[]", "run.run_id=abc"])
    assert cfg.check() is cfg
    assert cfg.trainer.max_training_steps == 7
    assert cfg.generator.sampling_params.temperature == 0.5
    assert cfg.data.val_data == []
    assert cfg.get("trainer.policy.model.path") == "builtin://tiny-qwen2"
    assert cfg.run_dir is not None and cfg.run_dir.name == "abc"
    assert preset("quickstart") == load_config("quickstart")


def test_yaml_round_trip(tmp_path):
    cfg = load_config("quickstart", ["trainer.seed=7"])
    path = cfg.save(tmp_path / "run.yaml")
    again = load_config(str(path))
    assert again == cfg
    assert JobConfig.from_yaml_text(cfg.to_yaml()) == cfg
    assert again.to_dotted()["trainer.seed"] == 7


def test_unknown_key_suggests_nearest():
    (line,) = _problems(overrides=["trainer.algorithm.advantage_estimater=grpo"])
    assert line.startswith("trainer.algorithm.advantage_estimater: unknown key")
    assert "trainer.algorithm.advantage_estimator" in line
    (line,) = _problems(overrides=["trainer.lr=0.1"])
    assert "trainer.policy.optimizer_config.lr" in line


def test_wrong_type_and_range_and_choice_name_key_and_value():
    lines = _problems(overrides=["trainer.train_batch_size=many", "trainer.policy.optimizer_config.lr=-1",
                                 "generator.sampling_params.top_p=1.5"])
    assert len(lines) == 3
    assert any(x.startswith("trainer.train_batch_size: 'many' is not allowed; it should be a valid integer")
               for x in lines)
    assert any(x.startswith("trainer.policy.optimizer_config.lr: -1") for x in lines)
    assert any(x.startswith("generator.sampling_params.top_p: 1.5") for x in lines)
    (line,) = _problems(overrides=["trainer.algorithm.advantage_estimator=grpoo"])
    assert "'grpoo' is not allowed; allowed: grpo, rloo" in line and "did you mean 'grpo'" in line
    (line,) = _problems(overrides=["generator.inference_engine.backend=tpu"])
    assert line.startswith("generator.inference_engine.backend: 'tpu'") and "torch, vllm" in line


def test_batch_arithmetic_and_missing_files(tmp_path):
    lines = _problems(overrides=["trainer.train_batch_size=10", "trainer.policy_mini_batch_size=4",
                                 "trainer.micro_train_batch_size_per_gpu=8",
                                 f"data.train_data=[{tmp_path}/nope.parquet]",
                                 "trainer.policy.model.path=/no/such/model"])
    keys = [x.split(":", 1)[0] for x in lines]
    assert keys == ["trainer.train_batch_size", "data.train_data", "trainer.policy.model.path"]
    (line,) = _problems(overrides=["trainer.micro_train_batch_size_per_gpu=7"])
    assert line.startswith("trainer.micro_train_batch_size_per_gpu: 7 does not divide")


def test_async_needs_disaggregated_placement():
    (line,) = _problems(overrides=["trainer.async_one_step=true"])
    assert line == ("trainer.placement.colocate_all: true is not allowed with trainer.async_one_step=true "
                    "(generation overlaps training, so they need their own devices); allowed: false")
    (line,) = _problems(overrides=["trainer.fully_async.enabled=true", "trainer.fully_async.max_staleness_steps=2"])
    assert line.startswith("trainer.placement.colocate_all: true is not allowed with trainer.fully_async.enabled=true")
    for flag in ("trainer.async_one_step=true", "trainer.fully_async.enabled=true"):
        load_config("quickstart", [flag, "trainer.placement.colocate_all=false"]).check()


def test_bad_override_syntax_and_sections():
    (line,) = _problems(overrides=["trainer.seed"])
    assert "key=value" in line
    (line,) = _problems(overrides=["trainer.algorithm=grpo"])
    assert line.startswith("trainer.algorithm: is a section")
    with pytest.raises(ConfigError, match="neither a preset"):
        load_config("quickstrat")
    with pytest.raises(ConfigError, match="did you mean 'quickstart'"):
        preset("quikstart")


def test_every_key_is_reachable():
    keys = all_keys()
    assert "trainer.algorithm.eps_clip_high" in keys and "run.run_root" in keys
    cfg = JobConfig()
    for key in keys:
        cfg.get(key)
    assert set(cfg.to_dotted()) == set(keys)


def test_async_takes_token_tis_unless_the_config_says_otherwise(tmp_path):
    """skyrl-nb's one difference for async runs (docs/config.md): tis_ratio_type=token when unsaid."""
    apart = ["trainer.placement.colocate_all=false"]
    key = "trainer.algorithm.off_policy_correction.tis_ratio_type"

    def tis(cfg: JobConfig):
        return cfg.trainer.algorithm.off_policy_correction.tis_ratio_type

    assert tis(load_config("quickstart", apart)) is None  # sync: SkyRL's default, off
    for switch in ("trainer.async_one_step=true", "trainer.fully_async.enabled=true"):
        on = load_config("quickstart", [*apart, switch])
        assert tis(on) == "token", switch
        assert on == load_config("quickstart", [*apart, switch, f"{key}=token"])  # the same job as asking
        assert tis(load_config("quickstart", [*apart, switch, f"{key}=null"])) is None  # an explicit off stays
        assert tis(load_config("quickstart", [*apart, switch, f"{key}=sequence"])) == "sequence"
    # a saved config holds every key: turning async on over it still gets the default, keeping it does not drop it
    sync = load_config("quickstart", apart)
    assert tis(sync.with_overrides(["trainer.async_one_step=true"])) == "token"
    off = load_config("quickstart", [*apart, "trainer.async_one_step=true", f"{key}=null"])
    assert tis(off.with_overrides(["trainer.seed=3"])) is None
    saved = tmp_path / "job.yaml"
    saved.write_text(load_config("quickstart", [*apart, "trainer.async_one_step=true"]).to_yaml())
    assert tis(load_config(str(saved))) == "token"


def test_pydantics_own_text_never_repeats_a_refused_webhook_url() -> None:
    """A webhook URL carries its token: refused as trainer.alerts.webhook, it must not come back in the
    ValidationError's text (pydantic adds input_value=... unless told not to) when a section is built directly."""
    import pydantic

    from skyrl_core.config import JobConfig

    with pytest.raises(pydantic.ValidationError) as refused:
        JobConfig(trainer={"alerts": {"webhook": "https://hooks.slack.com/services/T0/B0/SECRETTOKEN"}})
    assert "SECRETTOKEN" not in str(refused.value) and "trainer.alerts.webhook" in str(refused.value)
