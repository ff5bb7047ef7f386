"""The job config's sections (``trainer``, ``generator``, ...), one pydantic model each, with SkyRL's key names and
defaults; :class:`skyrl_core.config.JobConfig` holds them. Each section forbids unknown keys and refuses lax
coercions (a bool for a number, bytes for text, an int past 64 bits). One idea: the schema, every key with its type,
bound and default, in one place (it grows with SkyRL's keys)."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic_core import PydanticCustomError

from skyrl_core.alerts import webhook_problem
from skyrl_core.choices import (
    AlertKind,
    Backend,
    BasePrecision,
    CispoAnchor,
    DPPOType,
    DynamicSampling,
    Engine,
    KLController,
    KLEstimator,
    Logger,
    LoraInit,
    LossReduction,
    Precision,
    ResumeMode,
    RewardErrors,
    Scheduler,
    SequenceMaskMetric,
    Strategy,
    TISRatioType,
)
from skyrl_core.keys import _dotted_table_html, _flatten, _scalar_kind
from skyrl_core.runs import run_id_problem

_BYTES = (bytes, bytearray, memoryview)


#: Every int key fits in 64 bits (torch and numpy take them as int64).
INT_BITS = 64


class _Section(BaseModel):
    # use_enum_values: a section holds plain strings, so it dumps, pickles and compares as before;
    # allow_inf_nan=False: no float key takes inf or nan (the run would die at step 1);
    # hide_input_in_errors: pydantic's own text never repeats a refused value (a webhook URL carries its token)
    model_config = ConfigDict(extra="forbid", validate_assignment=True, defer_build=True, use_enum_values=True,
                              validate_default=True, allow_inf_nan=False, hide_input_in_errors=True)

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


class DataConfig(_Section):
    """Where prompts come from: Parquet/JSONL files in SkyRL's format, or built-in datasets."""

    train_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/train"])
    val_data: list[str] = Field(default_factory=lambda: ["builtin://arithmetic/test"])
    # the rows' own column names for what skyrl-nb reads: {prompt: question, ground_truth: answer}
    # (skyrl_core.datarows.COLUMN_ROLES); every other column reaches the environment and the reward functions
    columns: dict[str, str] = Field(default_factory=dict)

    @field_validator("columns")
    @classmethod
    def _known_roles(cls, value: dict[str, str]) -> dict[str, str]:
        from skyrl_core.datarows import columns_problem

        problem = columns_problem(value)
        if problem:
            raise ValueError(problem.split(": ", 1)[1])
        return value


class RewardFunctionConfig(_Section):
    """One reward function of ``reward.functions``: its name (the series ``reward/<name>``), where it is, and its
    weight in the sample's reward. ``file`` is ``inputs://reward-<name>-<hash>.pkl`` for a function written in a
    cell and shipped with the job by ``launch(reward=...)``, or ``module:function`` for one in an importable module
    (listed under ``plugins:`` to travel with the job)."""

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
    file: str = Field(min_length=1)
    weight: float = 1.0


class RewardConfig(_Section):
    """Reward functions written in Python (``skyrl_core.reward_functions``), scored in the engine's reward stage
    in a pool of ``max_workers`` threads, each call at most ``timeout_s``. Empty ``functions``: each row's
    environment scores it (``environment.env_class``)."""

    functions: list[RewardFunctionConfig] = Field(default_factory=list)
    timeout_s: float = Field(30.0, gt=0, le=3600)
    errors: RewardErrors = RewardErrors.SKIP
    max_workers: int = Field(128, ge=1, le=256)


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


class CispoConfig(_Section):
    """CISPO's IS-weight band ``[1 - cispo_eps_clip_low, 1 + cispo_eps_clip_high]``: SkyRL 0.4.0's defaults, [0, 5]
    (ScaleRL's; SkyRL 0.3.0's were 0.0 and 5.0, [1, 6]). ``cispo_anchor`` (0.4.0): the ratio against the trainer's
    log-probs before the update (``old``) or the sampler's (``rollout``, then it is the off-policy correction)."""

    cispo_eps_clip_low: float = Field(1.0, ge=0)
    cispo_eps_clip_high: float = Field(4.0, ge=0)
    cispo_anchor: CispoAnchor = CispoAnchor.OLD


class SapoConfig(_Section):
    """SAPO's soft gate ``sigmoid(tau (r - 1)) * 4 / tau``: ``tau_pos`` where the advantage is positive, else
    ``tau_neg``."""

    tau_pos: float = Field(1.0, gt=0)
    tau_neg: float = Field(1.05, gt=0)


class ClipCovConfig(_Section):
    """Clip-Cov: a random ``clip_ratio`` share of the tokens whose centred advantage x log-prob covariance lies in
    ``(clip_cov_lb, clip_cov_ub)`` gets no gradient (SkyRL's units: advantages scaled by the loss reduction)."""

    clip_ratio: float = Field(0.0002, ge=0, le=1)
    clip_cov_lb: float = 1.0
    clip_cov_ub: float = 5.0


class KLCovConfig(_Section):
    """KL-Cov: the ``kl_cov_frac`` share of tokens with the largest covariance get ``ppo_kl_coef * |log r|``."""

    kl_cov_frac: float = Field(0.2, ge=0, le=1)
    ppo_kl_coef: float = Field(1.0, ge=0)


class DPPOConfig(_Section):
    """DPPO: a token whose probability moved from the sampler's by more than ``delta_high`` (positive advantage)
    or ``delta_low`` (negative), in total variation or binary KL (``dppo_type``), gets no gradient."""

    dppo_type: DPPOType = DPPOType.BINARY_TV
    delta_low: float = Field(0.2, ge=0)
    delta_high: float = Field(0.2, ge=0)


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
    sapo: SapoConfig = Field(default_factory=SapoConfig)
    clip_cov: ClipCovConfig = Field(default_factory=ClipCovConfig)
    kl_cov: KLCovConfig = Field(default_factory=KLCovConfig)
    dppo: DPPOConfig = Field(default_factory=DPPOConfig)
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


class AlertsConfig(_Section):
    """``trainer.alerts``: a message to a webhook (Slack's ``{"text": ...}``) or an SNS topic when the run fails,
    is lost, stalls (no step for ``stall_factor`` x the median step time, and at least ``stall_min_s``) or its
    moving mean reward (``reward/avg_raw_reward`` over ``reward_window`` steps) falls under ``reward_below``; once
    per event (``skyrl_core.alerts``, docs/alerts.md). Off while ``webhook`` is None. ``webhook`` names where the
    URL is (``env:NAME``), never the URL itself: it carries a token and the config is saved with the run."""

    webhook: str | None = None
    events: list[AlertKind] = Field(default_factory=lambda: list(AlertKind))
    stall_factor: float = Field(5.0, gt=1)
    stall_min_s: float = Field(60.0, ge=0)
    reward_below: float | None = None
    reward_window: int = Field(5, ge=1, le=1000)
    timeout_s: float = Field(5.0, gt=0, le=60)

    @field_validator("webhook")
    @classmethod
    def _where_not_what(cls, value: str | None) -> str | None:
        problem = None if value is None else webhook_problem(value)
        if problem:
            raise ValueError(problem)
        return value


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
    # skyrl-nb's: a failure outside the user's code (a lost node, a killed actor or driver, out of memory) restarts
    # the trainer from its latest checkpoint, up to this many times, without the notebook (skyrl_engine.supervisor)
    max_restarts: int = Field(0, ge=0, le=1000)
    eval_interval: int = Field(5, ge=-1)
    eval_before_train: bool = True
    eval_batch_size: int = Field(1024, ge=1)
    num_threads: int = Field(0, ge=0)
    # skyrl-nb's: the trainer's passes run each distinct prompt of a micro-batch once (docs/config.md)
    share_prompt_prefix: bool = True
    # skyrl-nb's: LoRA's frozen base matmuls in bfloat16 on CPUs with AMX or AVX512-BF16 (docs/config.md, lora_forward)
    lora_base_precision: BasePrecision = BasePrecision.FP32
    # SkyRL's key and names; skyrl-nb's default is console (SkyRL's, wandb, needs an account). The engine's
    # trackers: skyrl_engine/tracking.py (MLflow reads MLFLOW_TRACKING_URI, a SageMaker MLflow ARN included)
    logger: Logger | list[Logger] = Logger.CONSOLE
    async_one_step: bool = False
    fully_async: FullyAsyncConfig = Field(default_factory=FullyAsyncConfig)
    # skyrl-nb's: messages when the run fails, is lost, stalls or its reward collapses (skyrl_core.alerts)
    alerts: AlertsConfig = Field(default_factory=AlertsConfig)


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
    # environment classes launch shipped by value (a class registered from a notebook cell): name -> inputs://file
    shipped: dict[str, str] = Field(default_factory=dict)


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
