"""The job config: one validated object, keyed by SkyRL's own dotted names.

A config moves between skyrl-nb's engine and SkyRL's trainer unchanged where both support a key.
Load one from a preset, a YAML file or a dict, then apply ``key=value`` overrides::

    >>> from skyrl_nb.config import load_config
    >>> cfg = load_config("quickstart", ["trainer.max_training_steps=20"])
    >>> cfg.trainer.algorithm.advantage_estimator
    'grpo'

Every problem is reported as one line that starts with the dotted key, names the value and says
what is allowed (``ConfigError.problems``). Only pydantic and yaml are imported here.
"""

from __future__ import annotations

import copy
import math
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skyrl_core.choices import (
    GROUP_ESTIMATORS,
    AdvantageEstimator,
    Backend,
    DynamicSampling,
    KLController,
    KLEstimator,
    LossReduction,
    ResumeMode,
    Scheduler,
    SequenceMaskMetric,
    TISRatioType,
)
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    PluginError,
    did_you_mean,
    environment_names,
    load_plugins,
    not_allowed,
)
from skyrl_core.runs import RUN_ID_PATTERN

BUILTIN_PREFIX = "builtin://"
BUILTIN_MODELS = ("builtin://tiny-qwen2",)
BUILTIN_DATASETS = ("builtin://arithmetic/train", "builtin://arithmetic/test", "builtin://text2sql/train",
                    "builtin://text2sql/test")


class ConfigError(ValueError):
    """A config that cannot run. ``problems`` holds one line per problem, each naming its key."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class _Section(BaseModel):
    # use_enum_values: a section holds plain strings, so it dumps, pickles and compares as before
    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True, use_enum_values=True,
                              validate_default=True)

    def _repr_html_(self) -> str:
        return _dotted_table_html(_flatten(self.model_dump()))


# ---------------------------------------------------------------------------------- data / model
class DataConfig(_Section):
    """Where prompts come from: Parquet/JSONL files in SkyRL's format, or built-in datasets."""

    train_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/train"])
    val_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/test"])


class ModelConfig(_Section):
    path: str | None = None


class OptimizerConfig(_Section):
    lr: float = Field(1e-6, gt=0, le=1.0)
    adam_betas: list[float] = Field(default_factory=lambda: [0.9, 0.999], min_length=2, max_length=2)
    weight_decay: float = Field(1e-2, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    num_warmup_steps: int = Field(0, ge=0)
    scheduler: Scheduler = Scheduler.CONSTANT_WITH_WARMUP


class PolicyConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)


class CriticConfig(_Section):
    """Value model for ``gae``; ``model.path`` None means: a value head on a copy of the policy."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer_config: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(lr=5e-6))


# ---------------------------------------------------------------------------------- algorithm
class CispoConfig(_Section):
    cispo_eps_clip_low: float = Field(0.0, ge=0)
    cispo_eps_clip_high: float = Field(5.0, ge=0)


class DynamicSamplingConfig(_Section):
    """DAPO dynamic sampling: drop (``filter``) or ``replace`` groups whose rewards do not vary."""

    type: DynamicSampling | None = None
    max_sample_batches: int = Field(30, ge=0)
    min_replace_ratio: float = Field(0.3, ge=0, le=1)


class OverlongBufferConfig(_Section):
    """DAPO soft overlong penalty: the last ``len`` tokens before the limit cost up to ``penalty_factor``."""

    len: int = Field(0, ge=0)
    penalty_factor: float = Field(1.0, ge=0)


class KLControllerConfig(_Section):
    type: KLController = KLController.FIXED
    kl_target: float = Field(0.1, gt=0)
    horizon: int = Field(10000, gt=0)


class OffPolicyCorrectionConfig(_Section):
    """SkyRL's correction for rollouts sampled by a policy other than the trainer's (async, vLLM).

    The ratio is ``exp(old_log_probs - rollout_logprobs)``; see
    ``skyrl_engine.algorithms.compute_off_policy_correction``. All off by default.
    """

    tis_ratio_type: TISRatioType | None = None
    token_tis_ratio_clip_high: float = Field(2.0, gt=0)
    sequence_tis_ratio_clip_high: float = Field(5.0, gt=0)
    sequence_mask_metric: SequenceMaskMetric | None = None
    geo_mask_high: float = Field(1.01, gt=0)
    geo_mask_low: float = Field(0.99, ge=0)
    product_mask_high: float = Field(2.0, gt=0)
    product_mask_low: float = Field(0.5, ge=0)
    outlier_token_is_threshold_low: float | None = Field(None, ge=0)
    outlier_token_is_threshold_high: float | None = Field(None, gt=0)
    token_mask_is_threshold_low: float | None = Field(None, ge=0)
    token_mask_is_threshold_high: float | None = Field(None, gt=0)


class AlgorithmConfig(_Section):
    advantage_estimator: str = "grpo"  # open to plug-ins: checked against skyrl_core.registry
    policy_loss_type: str = "regular"  # likewise
    loss_reduction: LossReduction = LossReduction.TOKEN_MEAN
    eps_clip_low: float = Field(0.2, ge=0, le=1)
    eps_clip_high: float = Field(0.2, ge=0)
    clip_ratio_c: float = Field(3.0, gt=1)
    grpo_norm_by_std: bool = True
    use_kl_loss: bool = True
    kl_loss_coef: float = Field(0.001, ge=0)
    kl_estimator_type: KLEstimator = KLEstimator.K3
    use_kl_in_reward: bool = False
    kl_ctrl: KLControllerConfig = Field(default_factory=KLControllerConfig)
    use_entropy_loss: bool = False
    entropy_loss_coef: float = Field(0.01, ge=0)
    gamma: float = Field(1.0, ge=0, le=1)
    lambd: float = Field(1.0, ge=0, le=1)
    value_clip: float | None = Field(0.2, gt=0)  # the critic's loss clips V around its pre-update value
    max_seq_len: int | None = Field(None, gt=0)
    cispo: CispoConfig = Field(default_factory=CispoConfig)
    off_policy_correction: OffPolicyCorrectionConfig = Field(default_factory=OffPolicyCorrectionConfig)
    dynamic_sampling: DynamicSamplingConfig = Field(default_factory=DynamicSamplingConfig)
    overlong_buffer: OverlongBufferConfig = Field(default_factory=OverlongBufferConfig)


class PlacementConfig(_Section):
    colocate_all: bool = True
    policy_num_nodes: int = Field(1, ge=1)
    policy_num_gpus_per_node: int = Field(1, ge=0)


class FullyAsyncConfig(_Section):
    enabled: bool = False
    max_staleness_steps: int = Field(1, ge=0)


class TrainerConfig(_Section):
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    critic: CriticConfig = Field(default_factory=CriticConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    placement: PlacementConfig = Field(default_factory=PlacementConfig)
    train_batch_size: int = Field(1024, ge=1)
    policy_mini_batch_size: int = Field(256, ge=1)
    critic_mini_batch_size: int = Field(256, ge=1)
    micro_train_batch_size_per_gpu: int = Field(1, ge=1)
    micro_forward_batch_size_per_gpu: int = Field(1, ge=1)
    update_epochs_per_batch: int = Field(1, ge=1)
    epochs: int = Field(1, ge=1)
    max_training_steps: int | None = Field(None, ge=1)
    seed: int = Field(42, ge=0)
    ckpt_path: str | None = None
    ckpt_interval: int = Field(10, ge=0)
    max_ckpts_to_keep: int = Field(-1, ge=-1)
    resume_mode: ResumeMode = ResumeMode.LATEST
    resume_path: str | None = None
    eval_interval: int = Field(5, ge=-1)
    eval_before_train: bool = True
    eval_batch_size: int = Field(1024, ge=1)
    num_threads: int = Field(0, ge=0)
    async_one_step: bool = False
    fully_async: FullyAsyncConfig = Field(default_factory=FullyAsyncConfig)


# ---------------------------------------------------------------------------------- generator
class SamplingParams(_Section):
    max_generate_length: int = Field(1024, ge=1)
    temperature: float = Field(1.0, ge=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(-1, ge=-1)
    min_p: float = Field(0.0, ge=0, le=1)


class InferenceEngineConfig(_Section):
    backend: Backend = Backend.TORCH
    num_engines: int = Field(1, ge=1)
    tensor_parallel_size: int = Field(1, ge=1)
    gpu_memory_utilization: float = Field(0.8, gt=0, le=1)
    enable_prefix_caching: bool = True


class GeneratorConfig(_Section):
    n_samples_per_prompt: int = Field(5, ge=1)
    max_turns: int = Field(1, ge=1)
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    eval_sampling_params: SamplingParams = Field(default_factory=lambda: SamplingParams(temperature=0.0))
    eval_n_samples_per_prompt: int = Field(1, ge=1)
    apply_overlong_filtering: bool = False
    inference_engine: InferenceEngineConfig = Field(default_factory=InferenceEngineConfig)


class EnvironmentConfig(_Section):
    env_class: str = "gsm8k"  # open to plug-ins: checked against skyrl_core.registry.environment_names()


class RunConfig(_Section):
    """skyrl-nb's own keys: where the run store lives."""

    run_root: str = "~/skyrl-runs"
    run_id: str | None = Field(None, pattern=RUN_ID_PATTERN)
    store_token_data: bool = True


# ---------------------------------------------------------------------------------- the config
class JobConfig(_Section):
    """A whole training job. Sections and key names follow SkyRL (``trainer.algorithm.…``)."""

    data: DataConfig = Field(default_factory=DataConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    plugins: list[str] = Field(default_factory=list)
    """Modules imported before validation (and in every engine process): they register advantage
    estimators, policy losses and environments (``skyrl_core.registry``)."""

    # -- access ---------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The value at a dotted key, e.g. ``cfg.get("trainer.seed")``."""
        node: Any = self
        for part in key.split("."):
            if not isinstance(node, BaseModel) or part not in type(node).model_fields:
                raise ConfigError([_unknown_key_message(key)])
            node = getattr(node, part)
        return node

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_dotted(self) -> dict[str, Any]:
        """The config as a flat ``{"trainer.seed": 42, ...}`` mapping."""
        return _flatten(self.to_dict())

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the config as YAML (atomically) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_yaml())
        tmp.replace(path)
        return path

    @classmethod
    def from_yaml_text(cls, text: str) -> JobConfig:
        return load_config(_parse_yaml_mapping(text, "<yaml>"))

    def with_overrides(self, overrides: list[str] | dict[str, Any]) -> JobConfig:
        """A new validated config with ``key=value`` overrides (or a dotted dict) applied."""
        return load_config(self.to_dict(), overrides)

    # -- checks beyond single fields --------------------------------------------------------
    def problems(self, *, check_files: bool = True) -> list[str]:
        """Cross-field and file-system checks; an empty list means the config can run."""
        return _cross_checks(self, check_files=check_files)

    def check(self, *, check_files: bool = True) -> JobConfig:
        """Raise ConfigError (one line per problem) unless the config can run; return self."""
        found = self.problems(check_files=check_files)
        if found:
            raise ConfigError(found)
        return self

    # -- derived ----------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path | None:
        if self.run.run_id is None:
            return None
        return Path(os.path.expanduser(self.run.run_root)) / self.run.run_id

    def total_steps(self, train_size: int | None = None) -> int | None:
        """Steps the job will run: ``max_training_steps`` or epochs × batches when the size is known."""
        if self.trainer.max_training_steps is not None:
            return self.trainer.max_training_steps
        if train_size is None:
            return None
        return self.trainer.epochs * max(1, train_size // self.trainer.train_batch_size)

    def __repr__(self) -> str:
        t, g = self.trainer, self.generator
        return (
            f"JobConfig(model={t.policy.model.path!r}, env={self.environment.env_class!r}, "
            f"algorithm={t.algorithm.advantage_estimator}/{t.algorithm.policy_loss_type}, "
            f"batch={t.train_batch_size}x{g.n_samples_per_prompt}, lr={t.policy.optimizer_config.lr:g}, "
            f"steps={t.max_training_steps}, run={self.run.run_id!r})"
        )

    __str__ = __repr__

    def _repr_html_(self) -> str:
        import html

        head = html.escape(repr(self)[len("JobConfig"):])  # noqa: E501
        return f"<details><summary><b>JobConfig</b> {head}</summary>{_dotted_table_html(self.to_dotted())}</details>"


# ---------------------------------------------------------------------------------- presets
_QUICKSTART: dict[str, Any] = {
    "data": {"train_data": ["builtin://arithmetic/train"], "val_data": ["builtin://arithmetic/test"]},
    "trainer": {
        "policy": {
            "model": {"path": "builtin://tiny-qwen2"},
            "optimizer_config": {"lr": 4e-4, "weight_decay": 0.0, "max_grad_norm": 1.0},
        },
        "algorithm": {
            "advantage_estimator": "grpo",
            "policy_loss_type": "regular",
            "use_kl_loss": False,
        },
        "critic": {"optimizer_config": {"lr": 4e-4, "weight_decay": 0.0, "max_grad_norm": 1.0}},  # used by gae only
        "train_batch_size": 16,
        "policy_mini_batch_size": 16,
        "critic_mini_batch_size": 16,
        "micro_train_batch_size_per_gpu": 128,
        "max_training_steps": 190,
        "ckpt_interval": 50,
        "max_ckpts_to_keep": 2,
        "resume_mode": "none",
        "eval_interval": 50,
        "eval_before_train": True,
        "eval_batch_size": 64,
        "num_threads": 1,
    },
    "generator": {
        "n_samples_per_prompt": 8,
        "sampling_params": {"max_generate_length": 8, "temperature": 1.0},
        "eval_sampling_params": {"max_generate_length": 8, "temperature": 0.0},
    },
    "environment": {"env_class": "arithmetic"},
}

_DAPO: dict[str, Any] = _QUICKSTART | {
    "trainer": _QUICKSTART["trainer"]
    | {
        "algorithm": {
            "advantage_estimator": "grpo",
            "policy_loss_type": "regular",
            "loss_reduction": "token_mean",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.28,
            "use_kl_loss": False,
            "dynamic_sampling": {"type": "filter", "max_sample_batches": 4},
            "overlong_buffer": {"len": 2, "penalty_factor": 1.0},
        },
    },
    "generator": _QUICKSTART["generator"] | {"apply_overlong_filtering": True},
}

# Multi-turn text2sql (skyrl-gym's env) on small built-in SQLite databases; the tiny model is warm-started
# on answers in the env's format, so a few steps on 2 CPU cores show the whole loop. Those answers are
# 55-80 tokens (the built-in tokenizer is per character): a turn needs room for one, or every turn is
# cut off, invalid, and rewarded 0. At temperature 1 the tiny model rarely samples 70 exact characters.
_TEXT2SQL: dict[str, Any] = _QUICKSTART | {
    "data": {"train_data": ["builtin://text2sql/train"], "val_data": ["builtin://text2sql/test"]},
    "trainer": _QUICKSTART["trainer"]
    | {"train_batch_size": 4, "policy_mini_batch_size": 4, "critic_mini_batch_size": 4, "micro_train_batch_size_per_gpu": 16,
       "max_training_steps": 6, "ckpt_interval": 3, "eval_interval": 3, "eval_batch_size": 16},
    "generator": {"n_samples_per_prompt": 4, "max_turns": 3,
                  "sampling_params": {"max_generate_length": 96, "temperature": 0.6},  # SkyRL's text2sql example
                  "eval_sampling_params": {"max_generate_length": 96, "temperature": 0.0}},
    "environment": {"env_class": "text2sql"},
}

#: Named starting points. ``quickstart``: built-in tiny model on arithmetic, minutes on 2 CPU cores.
PRESETS: dict[str, dict[str, Any]] = {
    "quickstart": _QUICKSTART,
    "dapo": _DAPO,
    "text2sql": _TEXT2SQL,
}


def preset(name: str) -> JobConfig:
    """The named preset as a validated config (see ``PRESETS``)."""
    if name not in PRESETS:
        raise ConfigError([f"preset: {name!r} is not a preset; allowed: {', '.join(PRESETS)}"
                           + did_you_mean(name, list(PRESETS))])
    return load_config(copy.deepcopy(PRESETS[name]))


# ---------------------------------------------------------------------------------- loading
def load_config(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
) -> JobConfig:
    """Build a validated JobConfig.

    ``source`` is a preset name, a YAML file path, a dict, a JobConfig, or None for defaults;
    ``overrides`` are ``key=value`` strings (values parsed as YAML) or a ``{dotted_key: value}`` dict.
    Raises ConfigError with one line per problem (every problem, not just the first).
    """
    if source is None:
        base: dict[str, Any] = {}
    elif isinstance(source, JobConfig):
        base = source.to_dict()
    elif isinstance(source, dict):
        base = copy.deepcopy(source)
    else:
        text = os.fspath(source)
        if text in PRESETS:
            base = copy.deepcopy(PRESETS[text])
        elif text.endswith((".yaml", ".yml")) or os.path.sep in text or os.path.exists(text):
            path = Path(os.path.expanduser(text))
            if not path.is_file():
                raise ConfigError([f"config: file {text!r} does not exist"])
            base = _parse_yaml_mapping(path.read_text(), text)
        else:
            raise ConfigError([f"config: {text!r} is neither a preset ({', '.join(PRESETS)}) nor a YAML file"
                               + did_you_mean(text, list(PRESETS))])
    problems: list[str] = []
    for key, value in _parse_overrides(overrides, problems):
        _set_dotted(base, key, value, problems)
    problems.extend(_unknown_keys(base))
    if problems:
        raise ConfigError(problems)
    try:
        cfg = JobConfig.model_validate(base)
    except ValidationError as err:
        raise ConfigError(_pydantic_problems(err)) from None
    value_problems = _registry_checks(cfg)
    if value_problems:
        raise ConfigError(value_problems)
    return cfg


def as_config(source: JobConfig | dict[str, Any] | None = None) -> JobConfig:
    """A JobConfig from a JobConfig (itself), None (the defaults), a flat ``{"dotted.key": value}`` dict or
    a nested dict: how code that takes "a config" reads any of them with the schema's own defaults.

    >>> as_config({"trainer.placement.colocate_all": False}).trainer.placement.colocate_all
    False
    """
    if isinstance(source, JobConfig):
        return source
    if source is None:
        return load_config(None)
    if any("." in str(key) for key in source):
        return load_config(None, overrides=dict(source))
    return load_config(dict(source))


def parse_override(text: str) -> tuple[str, Any]:
    """Split one ``key=value`` override; the value is parsed as YAML (``3`` → int, ``[a]`` → list)."""
    if "=" not in text:
        raise ConfigError([f"{text}: an override must look like key=value (e.g. trainer.seed=3)"])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError([f"{text!r}: the key before '=' is empty"])
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key, value


def _parse_overrides(overrides: list[str] | dict[str, Any] | None, problems: list[str]):
    if not overrides:
        return []
    if isinstance(overrides, dict):
        return list(overrides.items())
    pairs = []
    for item in overrides:
        try:
            pairs.append(parse_override(item))
        except ConfigError as err:
            problems.extend(err.problems)
    return pairs


def _parse_yaml_mapping(text: str, where: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ConfigError([f"config: {where} is not valid YAML{at}"]) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"config: {where} must be a mapping of sections, got {type(data).__name__}"])
    return data


# ---------------------------------------------------------------------------------- key helpers
def all_keys() -> list[str]:
    """Every valid dotted key (leaves only)."""
    return sorted(_leaf_keys(JobConfig))


def _leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        sub = _section_type(field.annotation)
        if sub is not None:
            keys.extend(_leaf_keys(sub, f"{prefix}{name}."))
        else:
            keys.append(f"{prefix}{name}")
    return keys


def _section_type(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _set_dotted(tree: dict[str, Any], key: str, value: Any, problems: list[str]) -> None:
    model: type[BaseModel] | None = JobConfig
    node = tree
    parts = key.split(".")
    for i, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            problems.append(_unknown_key_message(key))
            return
        sub = _section_type(model.model_fields[part].annotation)
        if i == len(parts) - 1:
            if sub is not None and not isinstance(value, dict):
                problems.append(f"{key}: is a section, set one of its keys instead "
                                f"(e.g. {key}.{next(iter(sub.model_fields))}=...)")
                return
            node[part] = value
            return
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node, model = child, sub


def _unknown_keys(tree: dict[str, Any], model: type[BaseModel] = JobConfig, prefix: str = "") -> list[str]:
    found = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        if name not in model.model_fields:
            found.append(_unknown_key_message(key))
            continue
        sub = _section_type(model.model_fields[name].annotation)
        if sub is not None and isinstance(value, dict):
            found.extend(_unknown_keys(value, sub, f"{key}."))
    return found


def _unknown_key_message(key: str) -> str:
    return f"{key}: unknown key" + did_you_mean(key, all_keys())


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for name, value in tree.items():
        if isinstance(value, dict) and value:
            flat.update(_flatten(value, f"{prefix}{name}."))
        else:
            flat[f"{prefix}{name}"] = value
    return flat


def _allows_none(loc: tuple[Any, ...]) -> bool:
    """Whether the field at ``loc`` (a pydantic error location) may be null (off)."""
    import types
    import typing

    model: Any = JobConfig
    annotation: Any = None
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        if field is None:
            return False
        annotation = field.annotation
        model = _section_type(annotation)
    origin = typing.get_origin(annotation)
    return origin in (typing.Union, types.UnionType) and type(None) in typing.get_args(annotation)


def _pydantic_problems(err: ValidationError) -> list[str]:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"])
        msg = e["msg"]
        if e["type"] in ("literal_error", "enum"):
            allowed = msg.split("Input should be ", 1)[-1].replace("'", "").replace(" or ", ", ").split(", ")
            lines.append(not_allowed(key, e.get("input"), allowed, none_ok=_allows_none(e["loc"])))
            continue
        elif msg.startswith("Input should be "):
            msg = "not allowed; it should be " + msg[len("Input should be "):]
        else:
            msg = "not allowed: " + msg[0].lower() + msg[1:]
        lines.append(f"{key}: {e.get('input')!r} is {msg}")
    return lines


def _registry_checks(cfg: JobConfig) -> list[str]:
    """The names open to plug-ins: ``plugins:`` are imported first, then each name must be registered."""
    try:
        load_plugins(cfg.plugins)
    except PluginError as err:
        return [str(err)]
    a = cfg.trainer.algorithm
    found = [not_allowed(registry.key, value, registry.names())
             for registry, value in ((ADVANTAGE_ESTIMATORS, a.advantage_estimator),
                                     (POLICY_LOSSES, a.policy_loss_type))
             if value not in registry]
    envs = environment_names()  # None: no skyrl-gym here, so only the cluster can tell
    if envs is not None and cfg.environment.env_class not in envs:
        found.append(not_allowed("environment.env_class", cfg.environment.env_class, envs))
    return found


def _cross_checks(cfg: JobConfig, *, check_files: bool) -> list[str]:
    t, g, a = cfg.trainer, cfg.generator, cfg.trainer.algorithm
    found: list[str] = []
    found += _mini_batch_problems("policy_mini_batch_size", t.policy_mini_batch_size, t.train_batch_size,
                                  "it must be at most that")
    samples = t.policy_mini_batch_size * g.n_samples_per_prompt
    micro = t.micro_train_batch_size_per_gpu
    if micro > samples:
        found.append(f"trainer.micro_train_batch_size_per_gpu: {micro} is larger than one mini-batch "
                     f"({t.policy_mini_batch_size} prompts x {g.n_samples_per_prompt} samples = {samples})")
    elif samples % micro:
        found.append(f"trainer.micro_train_batch_size_per_gpu: {micro} does not divide one mini-batch of "
                     f"{samples} samples (policy_mini_batch_size x n_samples_per_prompt)")
    if a.advantage_estimator in GROUP_ESTIMATORS and g.n_samples_per_prompt < 2:
        found.append(f"generator.n_samples_per_prompt: 1 gives {a.advantage_estimator} no group to "
                     "compare within; use at least 2")
    if a.advantage_estimator == AdvantageEstimator.GAE:
        found.extend(_critic_checks(cfg))
    if a.eps_clip_low >= 1:
        found.append(f"trainer.algorithm.eps_clip_low: {a.eps_clip_low} must be below 1")
    if t.resume_mode == "from_path" and not t.resume_path:
        found.append("trainer.resume_path: None is not allowed when trainer.resume_mode=from_path; "
                     "give the global_step_N directory to resume from")
    if a.use_kl_loss and a.use_kl_in_reward:
        found.append("trainer.algorithm.use_kl_in_reward: true together with use_kl_loss=true counts KL "
                     "twice; turn one off")
    if a.dynamic_sampling.type is not None and a.advantage_estimator not in GROUP_ESTIMATORS:
        found.append(f"trainer.algorithm.dynamic_sampling.type: {a.dynamic_sampling.type!r} needs a "
                     f"group estimator (grpo, rloo), not {a.advantage_estimator!r}")
    if a.overlong_buffer.len >= g.sampling_params.max_generate_length and a.overlong_buffer.len:
        found.append(f"trainer.algorithm.overlong_buffer.len: {a.overlong_buffer.len} must be smaller than "
                     f"generator.sampling_params.max_generate_length={g.sampling_params.max_generate_length}")
    found.extend(_off_policy_checks(a.off_policy_correction))
    if not cfg.trainer.policy.model.path:
        found.append("trainer.policy.model.path: None is not allowed; give a local Hugging Face model "
                     f"directory or {BUILTIN_MODELS[0]}")
    if not cfg.data.train_data:
        found.append("data.train_data: [] is empty; give at least one Parquet/JSONL file")
    if not math.isfinite(t.policy.optimizer_config.lr):
        found.append(f"trainer.policy.optimizer_config.lr: {t.policy.optimizer_config.lr} must be finite")
    if (t.async_one_step or t.fully_async.enabled) and t.placement.colocate_all:
        which = "trainer.fully_async.enabled" if t.fully_async.enabled else "trainer.async_one_step"
        found.append(f"trainer.placement.colocate_all: true is not allowed with {which}=true (generation "
                     "overlaps training, so they need their own devices); allowed: false")
    if check_files:
        found.extend(_file_checks(cfg))
    return found


def _off_policy_checks(c: OffPolicyCorrectionConfig) -> list[str]:
    """Each band of ``off_policy_correction`` must have its low end below its high end."""
    key = "trainer.algorithm.off_policy_correction"
    found = []
    for low, high in (("geo_mask_low", "geo_mask_high"), ("product_mask_low", "product_mask_high"),
                      ("outlier_token_is_threshold_low", "outlier_token_is_threshold_high"),
                      ("token_mask_is_threshold_low", "token_mask_is_threshold_high")):
        lo, hi = getattr(c, low), getattr(c, high)
        if lo is not None and hi is not None and lo >= hi:
            found.append(f"{key}.{low}: {lo} is not below {high}={hi}; it must be smaller")
    return found


def _mini_batch_problems(name: str, mini: int, train_batch_size: int, bound_note: str) -> list[str]:
    """``trainer.<name>`` must be at most ``trainer.train_batch_size`` and divide it."""
    if mini > train_batch_size:
        return [f"trainer.{name}: {mini} is larger than trainer.train_batch_size={train_batch_size}; {bound_note}"]
    if train_batch_size % mini:
        return [f"trainer.train_batch_size: {train_batch_size} is not a multiple of trainer.{name}={mini}"]
    return []


def _critic_checks(cfg: JobConfig) -> list[str]:
    """What ``gae`` (a critic) needs of the batch sizes."""
    t, g = cfg.trainer, cfg.generator
    found = _mini_batch_problems("critic_mini_batch_size", t.critic_mini_batch_size, t.train_batch_size,
                                 "gae's critic needs it at most that")
    samples = t.critic_mini_batch_size * g.n_samples_per_prompt
    if not found and samples % min(t.micro_train_batch_size_per_gpu, samples):
        found.append(f"trainer.micro_train_batch_size_per_gpu: {t.micro_train_batch_size_per_gpu} does not divide "
                     f"one critic mini-batch of {samples} samples")
    return found


def _file_checks(cfg: JobConfig) -> list[str]:
    found = []
    for key in ("train_data", "val_data"):
        for item in getattr(cfg.data, key):
            if item.startswith(BUILTIN_PREFIX):
                if item not in BUILTIN_DATASETS:
                    found.append(f"data.{key}: {item!r} is not a built-in dataset; allowed: "
                                 f"{', '.join(BUILTIN_DATASETS)}")
                continue
            path = Path(os.path.expanduser(item))
            if not path.is_file():
                found.append(f"data.{key}: file {item!r} does not exist")
            elif path.suffix not in (".parquet", ".jsonl", ".json"):
                found.append(f"data.{key}: {item!r} has suffix {path.suffix!r}; allowed: .parquet, .jsonl, .json")
    model = cfg.trainer.policy.model.path
    if model:
        if model.startswith(BUILTIN_PREFIX):
            if model not in BUILTIN_MODELS:
                found.append(f"trainer.policy.model.path: {model!r} is not a built-in model; allowed: "
                             f"{', '.join(BUILTIN_MODELS)}")
        elif not (Path(os.path.expanduser(model)) / "config.json").is_file():
            found.append(f"trainer.policy.model.path: {model!r} is not a local Hugging Face model directory "
                         "(no config.json there); models cannot be downloaded on the cluster")
    if cfg.trainer.resume_mode == "from_path" and cfg.trainer.resume_path:
        if not Path(os.path.expanduser(cfg.trainer.resume_path)).is_dir():
            found.append(f"trainer.resume_path: {cfg.trainer.resume_path!r} is not a directory")
    return found


def _dotted_table_html(flat: dict[str, Any]) -> str:
    import html

    rows = "".join(
        f"<tr><td style='text-align:left'><code>{html.escape(k)}</code></td>"
        f"<td style='text-align:left'>{html.escape(repr(v))}</td></tr>"
        for k, v in flat.items()
    )
    return f"<table>{rows}</table>"

