"""Every choice a config key offers, defined once.

Config fields with a fixed set of values are typed with these enums (``skyrl_core.config``); the engine
compares against the same members; the config form lists them. Names are SkyRL's. Three kinds of choice
are open to plug-ins and live in :mod:`skyrl_core.registry` instead, seeded from the built-in names
here: advantage estimators, policy losses and environments.

``StrEnum`` members are strings: ``LossReduction.TOKEN_MEAN == "token_mean"``.
"""

from __future__ import annotations

from enum import StrEnum


class AdvantageEstimator(StrEnum):
    """The built-in ``trainer.algorithm.advantage_estimator`` names (plug-ins may add more)."""
    GRPO, RLOO, REINFORCE_PP, GAE, MAXRL = "grpo", "rloo", "reinforce++", "gae", "maxrl"


GROUP_ESTIMATORS = frozenset({AdvantageEstimator.GRPO, AdvantageEstimator.RLOO, AdvantageEstimator.MAXRL})
"""Estimators that compare a prompt's samples with each other (they need n_samples_per_prompt >= 2)."""


class PolicyLoss(StrEnum):
    """The built-in ``trainer.algorithm.policy_loss_type`` names (plug-ins may add more): the PPO family (regular,
    dual_clip, gspo, cispo, sapo), the ones weighed by the sampler's log-probs (rollout_is, dppo), the
    covariance-selected ones (clip_cov, kl_cov) and Tinker's two (cross_entropy, importance_sampling)."""
    REGULAR, DUAL_CLIP, GSPO, CISPO = "regular", "dual_clip", "gspo", "cispo"
    SAPO, ROLLOUT_IS, DPPO, CLIP_COV, KL_COV = "sapo", "rollout_is", "dppo", "clip_cov", "kl_cov"
    CROSS_ENTROPY, IMPORTANCE_SAMPLING = "cross_entropy", "importance_sampling"


ROLLOUT_LOSSES = frozenset({PolicyLoss.ROLLOUT_IS, PolicyLoss.DPPO})
"""Losses whose ratio is against the sampler's log-probs (SkyRL's fully async trainer takes only these)."""

UNCORRECTED_LOSSES = frozenset({PolicyLoss.CLIP_COV, PolicyLoss.KL_COV, PolicyLoss.CROSS_ENTROPY,
                                PolicyLoss.IMPORTANCE_SAMPLING})
"""Losses that ``trainer.algorithm.off_policy_correction`` does not reweigh or mask (as in SkyRL)."""


class DPPOType(StrEnum):
    """``trainer.algorithm.dppo.dppo_type``: which divergence masks a token (binary total variation or KL)."""
    BINARY_TV, BINARY_KL = "binary_tv", "binary_kl"


class CispoAnchor(StrEnum):
    """``trainer.algorithm.cispo.cispo_anchor`` (SkyRL 0.4.0): the log-probs CISPO's ratio is against, the
    trainer's before the update (``old``) or the sampler's (``rollout``)."""
    OLD, ROLLOUT = "old", "rollout"


class LossReduction(StrEnum):
    """``trainer.algorithm.loss_reduction``: how a mini-batch's token losses become one number."""
    TOKEN_MEAN, SEQUENCE_MEAN, SEQ_MEAN_TOKEN_SUM_NORM = "token_mean", "sequence_mean", "seq_mean_token_sum_norm"


class KLEstimator(StrEnum):
    """``trainer.algorithm.kl_estimator_type``."""
    K1, K2, K3, ABS = "k1", "k2", "k3", "abs"


class KLController(StrEnum):
    """``trainer.algorithm.kl_ctrl.type``."""
    FIXED, ADAPTIVE = "fixed", "adaptive"


class TISRatioType(StrEnum):
    """``trainer.algorithm.off_policy_correction.tis_ratio_type`` (null: off)."""
    TOKEN, SEQUENCE = "token", "sequence"


class SequenceMaskMetric(StrEnum):
    """``trainer.algorithm.off_policy_correction.sequence_mask_metric`` (null: off)."""
    PRODUCT, GEOMETRIC = "product", "geometric"


class DynamicSampling(StrEnum):
    """``trainer.algorithm.dynamic_sampling.type`` (null: off)."""
    FILTER, REPLACE = "filter", "replace"


class Scheduler(StrEnum):
    """``trainer.policy.optimizer_config.scheduler`` (transformers' scheduler names)."""
    CONSTANT_WITH_WARMUP, CONSTANT, LINEAR, COSINE = "constant_with_warmup", "constant", "linear", "cosine"


class ResumeMode(StrEnum):
    """``trainer.resume_mode``."""
    NONE, LATEST, FROM_PATH = "none", "latest", "from_path"


class RewardErrors(StrEnum):
    """``reward.errors``: what a reward function that raises on a sample does. ``skip``: that sample scores 0 for
    it, the error's last line is kept with the sample and counted in ``reward/errors``; ``fail``: the job stops."""
    SKIP, FAIL = "skip", "fail"


class Backend(StrEnum):
    """``generator.inference_engine.backend``: who samples."""
    TORCH, VLLM = "torch", "vllm"


class Logger(StrEnum):
    """``trainer.logger`` (SkyRL's key and names; one or a list): where step metrics go besides the run store.
    ``console`` prints one line per step (skyrl-nb's default; SkyRL's is ``wandb``, which needs an account)."""
    CONSOLE, MLFLOW, TENSORBOARD, WANDB = "console", "mlflow", "tensorboard", "wandb"


class Strategy(StrEnum):
    """``trainer.strategy`` (SkyRL's key; fsdp2 its default): how a policy on several ranks splits the work.
    ``fsdp2`` shards parameters, gradients and optimizer state (PyTorch's ``fully_shard``); ``ddp``
    keeps a full replica per rank (``DistributedDataParallel``)."""
    FSDP2, DDP = "fsdp2", "ddp"


class LoraInit(StrEnum):
    """``trainer.policy.model.lora.init_method``: how PEFT initialises the adapter (``init_lora_weights``).
    ``kaiming`` (SkyRL's default: A Kaiming-uniform, B zero) and ``gaussian`` (A normal) both start as
    the base model exactly, since B is zero."""
    KAIMING, GAUSSIAN = "kaiming", "gaussian"


class Precision(StrEnum):
    """A dtype of ``fsdp_config.mixed_precision`` (SkyRL's names)."""
    BF16, FP16, FP32 = "bf16", "fp16", "fp32"


class BasePrecision(StrEnum):
    """``trainer.lora_base_precision``: how the matmuls through LoRA's frozen base weights are computed on a CPU.
    ``fp32`` (the default) all in float32; ``bf16`` from bfloat16 copies of the inputs and the weights, accumulated
    in float32 (the adapters, activations, norms, attention and head stay float32); ``auto`` is ``bf16`` on a CPU
    that multiplies bfloat16 in hardware (AMX-BF16 tiles: 4th-generation Xeon and later; AVX512-BF16: 4th-generation
    EPYC, 3rd-generation Xeon), ``fp32`` elsewhere."""
    FP32, BF16, AUTO = "fp32", "bf16", "auto"


class Engine(StrEnum):
    """``run.engine``: who trains. ``skyrl_nb`` is this project's engine (``python -m skyrl_engine train``);
    ``skyrl`` runs SkyRL's own trainer through the bridge (``python -m skyrl_engine.skyrl_bridge``) with the
    config translated by :mod:`skyrl_core.skyrl_translate`, behind the same run store."""
    SKYRL_NB, SKYRL = "skyrl_nb", "skyrl"


class RunState(StrEnum):
    """A run's ``state`` in ``status.json`` (and a job's, lower-cased from Ray's)."""
    PENDING, RUNNING, SUCCEEDED, FAILED, STOPPED = "pending", "running", "succeeded", "failed", "stopped"

    @property
    def is_final(self) -> bool:
        """True once the run has ended (succeeded, failed or stopped)."""
        return self in FINAL_STATES


FINAL_STATES = frozenset({RunState.SUCCEEDED, RunState.FAILED, RunState.STOPPED})


class ReadState(StrEnum):
    """The states only readers show, never written to ``status.json``: what a reader concluded from what it
    found. ``lost``: running, but its heartbeat went stale or Ray says the job ended; ``damaged``: status.json
    is there but cannot be read as a status; ``no_status``: the run has files but no status.json;
    ``unreadable``: the run's folder cannot be read by this user (another user's, a symbolic-link loop)."""
    LOST, DAMAGED, NO_STATUS, UNREADABLE = "lost", "damaged", "no_status", "unreadable"


class Stage(StrEnum):
    """What a job is doing before its first step, as ``stage`` events in events.jsonl say (the dashboard shows
    it). ``submitted`` is the notebook's word (Ray is starting the job; no event yet); the engine writes the
    rest: its Python is up and reads data (``environment``), it loads the model (``model_load``), evaluates
    before training (``first_eval``), generates step 1's rollouts (``first_rollout``)."""
    SUBMITTED, ENVIRONMENT, MODEL_LOAD = "submitted", "environment", "model_load"
    FIRST_EVAL, FIRST_ROLLOUT = "first_eval", "first_rollout"

    @property
    def label(self) -> str:
        """The words a person reads: ``model load``."""
        return self.value.replace("_", " ")


class Phase(StrEnum):
    """What a training step is doing now, as the engine's ``skyrl_phase`` gauge says it (``skyrl_engine.telemetry``):
    the parts ``timing/*`` times, in a person's words (``generate``; ``train`` for advantages and the critic and
    policy updates, ``timing/policy_train``; ``sync`` for ``timing/sync_weights``; ``eval``; ``checkpoint`` for
    ``timing/save_checkpoints``), and ``idle`` between them (writing a step, waiting). The async schedules may be in
    two at once."""
    GENERATE, TRAIN, SYNC, EVAL, CHECKPOINT, IDLE = "generate", "train", "sync", "eval", "checkpoint", "idle"


class AlertKind(StrEnum):
    """``trainer.alerts.events``: what sends an alert (``skyrl_core.alerts``). ``failed``: the run failed;
    ``lost``: its process died without a word (the notebook sends this one); ``stalled``: no step for
    ``stall_factor`` x the median step time; ``reward_collapse``: the moving mean reward fell under ``reward_below``."""
    FAILED, LOST, STALLED, REWARD_COLLAPSE = "failed", "lost", "stalled", "reward_collapse"


def values(choice: type[StrEnum]) -> tuple[str, ...]:
    """The plain string values of an enum, in definition order: ``values(KLEstimator)`` → ('k1', ...)."""
    return tuple(member.value for member in choice)
