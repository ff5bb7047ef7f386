"""RL algorithms by SkyRL's names: advantage estimators, policy losses, KL, entropy, critic loss.

Two registries (:mod:`skyrl_core.registry`), filled at import and open to users, as SkyRL's
``ppo_utils``; a job's ``plugins:`` modules add to them (in every engine process)::

    @register_advantage_estimator("my_adv")
    def my_adv(token_level_rewards, response_mask, index, config, values=None): ...

    @register_policy_loss("my_loss")
    def my_loss(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None): ...

The trainer only calls the stable entry points :func:`compute_advantages`,
:func:`compute_policy_loss`, :func:`compute_approx_kl`, :func:`compute_kl_loss`,
:func:`compute_entropy` and :func:`compute_value_loss`.

Shapes: ``B`` sequences (samples) in the batch, ``T`` response tokens (right-padded). Every
``[B, T]`` tensor comes with ``response_mask[B, T]``: 1.0 on trained response tokens, 0.0 elsewhere.

``config`` is duck-typed: anything with SkyRL's ``trainer.algorithm`` attribute names (the config's
``AlgorithmConfig`` section, a ``SimpleNamespace`` in tests). A missing attribute takes the schema's
default (``skyrl_core.config.AlgorithmConfig``: SkyRL's defaults, defined there once).

Loss reduction. SkyRL writes every policy loss as a masked SUM and gets ``token_mean`` etc. by
rescaling the advantages beforehand (``apply_loss_reduction_to_advantages_minibatch``). Each loss
here is linear in the advantages, so this module instead returns per-token losses and divides the
masked sum by the same normaliser; the numbers are equal (tests/algorithms/test_parity_skyrl.py).
"""

from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    register_advantage_estimator,
    register_policy_loss,
)
from skyrl_engine.algorithms import more_losses  # noqa: F401 - registers sapo, rollout_is, dppo, clip_cov, ...
from skyrl_engine.algorithms.advantages import compute_advantages
from skyrl_engine.algorithms.kl import (
    AdaptiveKLController,
    FixedKLController,
    apply_kl_penalty,
    compute_approx_kl,
    compute_entropy,
    compute_kl_loss,
    compute_value_loss,
    get_kl_controller,
    masked_entropy,
)
from skyrl_engine.algorithms.masked import masked_mean, masked_var, masked_whiten
from skyrl_engine.algorithms.policy_losses import (
    compute_off_policy_correction,
    compute_policy_loss,
    reduce_loss,
    reduction_divisor,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "POLICY_LOSSES",
    "register_advantage_estimator",
    "register_policy_loss",
    "compute_advantages",
    "compute_policy_loss",
    "compute_off_policy_correction",
    "reduce_loss",
    "reduction_divisor",
    "compute_approx_kl",
    "compute_kl_loss",
    "compute_entropy",
    "masked_entropy",
    "masked_mean",
    "masked_var",
    "masked_whiten",
    "compute_value_loss",
    "apply_kl_penalty",
    "FixedKLController",
    "AdaptiveKLController",
    "get_kl_controller",
]
