"""The losses beside the PPO family and ``maxrl`` against values worked out by hand (no SkyRL needed; ~2 s here).

Each expected number is derived in the comment next to it from the formula, never by calling the code under test.
The same quantities are checked against SkyRL 0.3.0 and 0.4.0 themselves in test_parity_skyrl*.py.
"""

import math
from types import SimpleNamespace as NS

import numpy as np
import pytest
import torch

from skyrl_core.choices import UNCORRECTED_LOSSES, PolicyLoss
from skyrl_engine import algorithms as alg


def cfg(**kw):
    base = dict(eps_clip_low=0.2, eps_clip_high=0.2, loss_reduction="token_mean", max_seq_len=None)
    base.update(kw)
    return NS(**base)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), atol=tol, rtol=0)


def loss_and_grad(name, log_probs, old, adv, mask, config, rollout=None):
    lp = torch.tensor(log_probs, dtype=torch.float32, requires_grad=True)
    loss, metrics = alg.compute_policy_loss(name, lp, torch.tensor(old), torch.tensor(adv), torch.tensor(mask), config,
                                            rollout_logprobs=None if rollout is None else torch.tensor(rollout))
    loss.backward()
    return loss.item(), lp.grad, metrics


def test_sapo_soft_gate_and_its_plain_gradient_at_ratio_one():
    ln15 = math.log(1.5)
    config = cfg(sapo=NS(tau_pos=1.0, tau_neg=2.0))
    # r = 1.5 on both tokens. A=+1, tau 1: g = sigmoid(0.5) * 4 = 2.4898373, loss -2.4898373;
    # A=-1, tau 2: g = sigmoid(1.0) * 4 / 2 = 1.4621172, loss +1.4621172; token mean -0.51386
    loss, _, metrics = loss_and_grad("sapo", [[ln15 - 1, ln15 - 2]], [[-1.0, -2.0]], [[1.0, -1.0]], [[1.0, 1.0]], config)
    close(loss, (-2.4898373 + 1.4621172) / 2)
    assert metrics == {"clip_ratio": 0.0}
    # at r = 1: d/dlogp (-g(r) A) = -A * g'(1) * r = -A * (tau * 1/4 * 4 / tau) = -A, over 2 tokens
    _, grad, _ = loss_and_grad("sapo", [[-1.0, -2.0]], [[-1.0, -2.0]], [[1.0, -1.0]], [[1.0, 1.0]], config)
    close(grad, [[-0.5, 0.5]])


def test_rollout_is_weighs_by_the_samplers_ratio_and_zeroes_it_outside_the_band():
    lp = [[math.log(0.5), math.log(0.25)]]
    rollout = [[math.log(0.5) - math.log(1.1), math.log(0.25) - math.log(1.5)]]  # r = 1.1 (inside), 1.5 (outside 0.8..1.2)
    # token 1: -1.1 * A(2) * log 0.5 = 1.5249238; token 2: weight 0; token mean over 2
    loss, grad, metrics = loss_and_grad("rollout_is", lp, [[0.0, 0.0]], [[2.0, 2.0]], [[1.0, 1.0]], cfg(), rollout)
    close(loss, -1.1 * 2 * math.log(0.5) / 2)
    close(grad, [[-1.1 * 2 / 2, 0.0]])  # d/dlogp of -sg[w] A logp = -w A, over 2 tokens
    close(metrics["clip_ratio"], 0.5)
    with pytest.raises(ValueError, match="rollout_is.*needs the sampler's log-probs"):
        loss_and_grad("rollout_is", lp, [[0.0, 0.0]], [[2.0, 2.0]], [[1.0, 1.0]], cfg())


def test_dppo_masks_tokens_whose_probability_moved_too_far():
    q = math.log(0.3)  # the sampler's probability 0.3 everywhere
    lp = [[math.log(0.5), math.log(0.35), math.log(0.1), math.log(0.5)]]
    adv = [[1.0, 1.0, -1.0, -1.0]]
    tv = cfg(dppo=NS(dppo_type="binary_tv", delta_low=0.1, delta_high=0.1))
    # TV: 0.5-0.3 = 0.2 > 0.1 with A>0: dropped; 0.05: kept, -(0.35/0.3); A<0 and 0.3-0.1 = 0.2 > 0.1: dropped;
    # A<0 but p went up: kept, -(0.5/0.3)(-1). Token mean over 4
    loss, grad, metrics = loss_and_grad("dppo", lp, [[0.0] * 4], adv, [[1.0] * 4], tv, rollout=[[q] * 4])
    close(loss, (-(0.35 / 0.3) + 0.5 / 0.3) / 4)
    close(metrics["clip_ratio"], 0.5)
    close(grad, [[0.0, -(0.35 / 0.3) / 4, 0.0, (0.5 / 0.3) / 4]])  # d(-r A m)/dlogp = -r A m
    # binary KL of token 1: 0.3 ln(0.3/0.5) + 0.7 ln(0.7/0.5) = 0.0822829: dropped under 0.05, kept under 0.1
    for delta, dropped in ((0.05, True), (0.1, False)):
        kl = cfg(dppo=NS(dppo_type="binary_kl", delta_low=1.0, delta_high=delta))
        _, grad, _ = loss_and_grad("dppo", lp[:1], [[0.0] * 4], adv, [[1.0] * 4], kl, rollout=[[q] * 4])
        assert (grad[0, 0] == 0) == dropped
    # no rollout log-probs: the pre-update ones are the behaviour policy (r = 1, p = q: nothing moved)
    loss, _, metrics = loss_and_grad("dppo", lp, lp, adv, [[1.0] * 4], tv)
    close(loss, 0.0)
    close(metrics["clip_ratio"], 0.0)


CLIP_COV_LP = [[-1.0, -2.0, -3.0, -4.0]]  # mean -2.5


def test_clip_cov_zeroes_the_one_candidate_in_skyrls_scaled_units():
    # token mean over 4 tokens: SkyRL's scaled advantages a = A/4 = [1, 0, 0, -0.5], mean 0.125;
    # cov = (a - 0.125)(logp + 2.5) = [1.3125, -0.0625, 0.0625, 0.9375]; r = 1 so PPO clips nothing.
    # lb 1.0: token 0 alone is a candidate, max(1, int(0.0002 * 4)) = 1 of it is zeroed.
    config = cfg(clip_cov=NS(clip_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0))
    loss, grad, metrics = loss_and_grad("clip_cov", CLIP_COV_LP, CLIP_COV_LP, [[4.0, 0, 0, -2.0]], [[1.0] * 4], config)
    close(loss, 0.5)  # -a r summed without token 0: 0 + 0 + 0.5
    close(grad, [[0.0, 0.0, 0.0, 0.5]])  # d(-a r)/dlogp = -a r
    close(metrics["clip_ratio"], 0.25)
    # no candidate (lb above every cov): the plain PPO loss, which equals the token mean of -A r = (-4 + 2) / 4
    none = cfg(clip_cov=NS(clip_ratio=0.0002, clip_cov_lb=2.0, clip_cov_ub=5.0))
    loss, _, metrics = loss_and_grad("clip_cov", CLIP_COV_LP, CLIP_COV_LP, [[4.0, 0, 0, -2.0]], [[1.0] * 4], none)
    close(loss, -0.5)
    close(metrics["clip_ratio"], 0.0)


def test_clip_cov_draws_among_candidates_with_torchs_generator():
    # A = [4, 0, 0, -4]: a = [1, 0, 0, -1], mean 0; cov = [1.5, 0, 0, 1.5]: tokens 0 and 3 are candidates, one drawn.
    # Zeroing token 0 leaves loss +1, zeroing token 3 leaves -1.
    config = cfg(clip_cov=NS(clip_ratio=0.0002, clip_cov_lb=1.0, clip_cov_ub=5.0))
    seen = {}
    for seed in range(12):
        torch.manual_seed(seed)
        loss, _, _ = loss_and_grad("clip_cov", CLIP_COV_LP, CLIP_COV_LP, [[4.0, 0, 0, -4.0]], [[1.0] * 4], config)
        torch.manual_seed(seed)
        again, _, _ = loss_and_grad("clip_cov", CLIP_COV_LP, CLIP_COV_LP, [[4.0, 0, 0, -4.0]], [[1.0] * 4], config)
        assert loss == again  # the same seed, the same draw
        seen[round(loss, 6)] = seed
    assert set(seen) == {1.0, -1.0}


def test_kl_cov_adds_an_unscaled_kl_on_the_top_covariance_token():
    # as above a = [1, 0, 0, -0.5]; cov (plain means over the tokens) = [1.3125, -0.0625, 0.0625, 0.9375]:
    # max(1, int(4 * 0.25)) = 1 token, token 0, gets coef * |log r| = 1.0 * 0.5, NOT divided by the 4 tokens.
    old = [[-1.5, -2.0, -3.0, -4.0]]  # log r = [0.5, 0, 0, 0]
    config = cfg(kl_cov=NS(kl_cov_frac=0.25, ppo_kl_coef=1.0))
    loss, grad, metrics = loss_and_grad("kl_cov", CLIP_COV_LP, old, [[4.0, 0, 0, -2.0]], [[1.0] * 4], config)
    close(loss, -1 * math.exp(0.5) + 0.5 + 0.5)  # -a r over the tokens, plus the penalty
    close(grad, [[-math.exp(0.5) + 1.0, 0.0, 0.0, 0.5]])  # d(-a r + |log r|)/dlogp = -a r + sign(log r)
    assert metrics == {"clip_ratio": 0.0}


def test_cross_entropy_is_a_sum_under_every_reduction_and_takes_no_correction():
    lp, mask = [[-1.0, -2.0], [-0.5, -9.0]], [[1.0, 1.0], [1.0, 0.0]]
    off = NS(tis_ratio_type="token", token_tis_ratio_clip_high=2.0)
    for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
        config = cfg(loss_reduction=reduction, max_seq_len=8, off_policy_correction=off)
        loss, grad, _ = loss_and_grad("cross_entropy", lp, lp, [[5.0, 5.0], [5.0, 5.0]], mask, config,
                                      rollout=[[-3.0, -3.0], [-3.0, -3.0]])
        close(loss, 1 + 2 + 0.5)  # the masked -log p summed; advantages and the TIS weight (e^2 -> 2) play no part
        close(grad, [[-1.0, -1.0], [-1.0, 0.0]])


def test_importance_sampling_is_the_unclipped_ratio_times_advantage():
    # r = [2, 0.5]: -(2 * 1 + 0.5 * 1) / 2 = -1.25; importance_ratio the mean r 1.25; a TIS setting changes nothing
    config = cfg(off_policy_correction=NS(tis_ratio_type="token", token_tis_ratio_clip_high=1.0))
    loss, grad, metrics = loss_and_grad("importance_sampling", [[math.log(2), math.log(0.5)]], [[0.0, 0.0]],
                                        [[1.0, 1.0]], [[1.0, 1.0]], config, rollout=[[-5.0, -5.0]])
    close(loss, -1.25)
    close(grad, [[-1.0, -0.25]])  # d(-r A)/dlogp = -r A, over 2 tokens
    assert metrics == pytest.approx({"importance_ratio": 1.25})


def test_cispo_anchored_on_the_sampler():
    # r against the rollout: e^0.5 = 1.6487 clamped to 1 + 0.2; against old it would be 1 (inside)
    lp = [[-1.0]]
    config = cfg(cispo=NS(cispo_eps_clip_low=0.2, cispo_eps_clip_high=0.2, cispo_anchor="rollout"))
    loss, grad, metrics = loss_and_grad("cispo", lp, lp, [[2.0]], [[1.0]], config, rollout=[[-1.5]])
    close(loss, -2.0 * 1.2 * -1.0)  # -A sg[clip(r)] logp
    close(grad, [[-2.0 * 1.2]])
    close(metrics["clip_ratio"], 1.0)
    close(metrics["cispo/ratio_mean"], math.exp(0.5))
    close(metrics["cispo/ratio_clamped_mean"], 1.2)
    old = cfg(cispo=NS(cispo_eps_clip_low=0.2, cispo_eps_clip_high=0.2, cispo_anchor="old"))
    assert loss_and_grad("cispo", lp, lp, [[2.0]], [[1.0]], old, rollout=[[-1.5]])[2]["clip_ratio"] == 0.0
    tis = cfg(cispo=config.cispo, off_policy_correction=NS(tis_ratio_type="token"))
    with pytest.raises(ValueError, match="cispo_anchor: 'rollout' is not allowed with off_policy_correction"):
        loss_and_grad("cispo", lp, lp, [[2.0]], [[1.0]], tis, rollout=[[-1.5]])


def test_maxrl_divides_by_the_group_mean():
    # groups: a (1, 0, 0, 1) mean 0.5 -> 0.5/0.5 = 1 and -0.5/0.5 = -1; b (2,) alone keeps its score 2;
    # c (3, 1) mean 2 -> 0.5 and -0.5. Each over (mean + 1e-6).
    scores = [1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 1.0]
    rewards = torch.zeros(7, 2)
    rewards[:, 1] = torch.tensor(scores)
    index = np.array(["a"] * 4 + ["b"] + ["c"] * 2)
    adv, ret = alg.compute_advantages("maxrl", rewards, torch.ones(7, 2), index, cfg())
    expected = [0.5 / 0.500001, -0.5 / 0.500001, -0.5 / 0.500001, 0.5 / 0.500001, 2.0, 1 / 2.000001, -1 / 2.000001]
    close(adv[:, 0], expected)
    close(adv[:, 1], expected)
    assert torch.equal(adv, ret)


@pytest.mark.parametrize("reduction", ["token_mean", "sequence_mean", "seq_mean_token_sum_norm"])
def test_reduction_divisor_is_what_reduce_loss_divides_by(reduction):
    x, mask = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]]), torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    for kw in ({}, {"num_sequences": 5, "num_tokens": 11.0}):
        d = alg.reduction_divisor(mask, reduction, max_seq_len=4, **kw)
        close((x * mask / d).sum(), alg.reduce_loss(x, mask, reduction, max_seq_len=4, **kw))


def test_the_losses_that_take_no_correction_are_the_configs_list():
    """skyrl_core's UNCORRECTED_LOSSES (the config refuses a correction with them) is what the engine skips."""
    skipped = {name for name in alg.POLICY_LOSSES.names()
               if getattr(alg.POLICY_LOSSES.get(name), "off_policy_correction", True) is False}
    assert skipped == set(UNCORRECTED_LOSSES)
    assert set(alg.POLICY_LOSSES.names()) >= {str(p) for p in PolicyLoss}
