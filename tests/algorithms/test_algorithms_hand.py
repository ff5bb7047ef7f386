"""Advantage estimators, policy losses, reductions, KL and entropy against values worked out by hand.

Each expected number below is derived in the comment next to it from the formula, never by calling
the code under test.
"""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from skyrl_engine import algorithms as alg


def cfg(**kw):
    """An algorithm config with SkyRL's defaults, overridden by ``kw``."""
    base = dict(
        eps_clip_low=0.2, eps_clip_high=0.2, clip_ratio_c=3.0, loss_reduction="token_mean",
        grpo_norm_by_std=True, kl_estimator_type="k3", gamma=1.0, lambd=1.0, max_seq_len=None,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(torch.as_tensor(actual, dtype=torch.float64),
                               torch.as_tensor(expected, dtype=torch.float64), atol=tol, rtol=0)


# Seven samples in three groups: "a" (4 samples, scores 1, 0, 0, 1), "b" (one sample, score 2),
# "c" (two samples, scores 3, 1). The reward sits on the last response token; lengths differ.
MASK = torch.tensor([
    [1, 1, 1], [1, 1, 0], [1, 0, 0], [1, 1, 1],   # group a
    [1, 1, 0],                                    # group b
    [1, 1, 1], [1, 0, 0],                         # group c
], dtype=torch.float32)
SCORES = [1.0, 0.0, 0.0, 1.0, 2.0, 3.0, 1.0]
INDEX = np.array(["a", "a", "a", "a", "b", "c", "c"])


def rewards():
    r = torch.zeros_like(MASK)
    for i, s in enumerate(SCORES):
        r[i, int(MASK[i].sum()) - 1] = s
    return r


def per_sample(adv):
    """The advantage each row carries (identical on its response tokens, 0 on padding)."""
    assert torch.all(adv[MASK == 0] == 0)
    rows = []
    for i in range(adv.shape[0]):
        vals = adv[i][MASK[i] == 1]
        assert torch.allclose(vals, vals[0].expand_as(vals))
        rows.append(vals[0].item())
    return rows


def test_grpo_std_normalised_unbiased_std_and_group_of_one():
    adv, ret = alg.compute_advantages("grpo", rewards(), MASK, INDEX, cfg())
    # group a: mean 0.5, unbiased std sqrt(4 * 0.25 / 3) = sqrt(1/3) -> +-0.5 / (sqrt(1/3) + 1e-6)
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    # group b alone: mean 0, std 1 -> 2 / (1 + 1e-6)
    b = 2.0 / (1 + 1e-6)
    # group c: mean 2, unbiased std sqrt((1 + 1) / 1) = sqrt(2) -> +-1 / (sqrt(2) + 1e-6)
    c = 1.0 / (math.sqrt(2) + 1e-6)
    close(per_sample(adv), [a, -a, -a, a, b, c, -c])
    assert torch.equal(adv, ret)


def test_grpo_without_std_normalisation():
    adv, _ = alg.compute_advantages("grpo", rewards(), MASK, INDEX, cfg(grpo_norm_by_std=False))
    # centred only; the group of one keeps its raw score (mean taken as 0)
    close(per_sample(adv), [0.5, -0.5, -0.5, 0.5, 2.0, 1.0, -1.0])


def test_grpo_identical_scores_give_zero():
    r = torch.tensor([[1.0], [1.0], [1.0]])
    adv, _ = alg.compute_advantages("grpo", r, torch.ones(3, 1), np.array([7, 7, 7]), cfg())
    close(adv, torch.zeros(3, 1))  # (1 - 1) / (0 + 1e-6)


def test_rloo_leave_one_out():
    adv, ret = alg.compute_advantages("rloo", rewards(), MASK, INDEX, cfg())
    # group a: 1 - mean(0, 0, 1) = 2/3 ; 0 - mean(1, 0, 1) = -2/3 ; group b alone: 0 ; c: 3-1, 1-3
    close(per_sample(adv), [2 / 3, -2 / 3, -2 / 3, 2 / 3, 0.0, 2.0, -2.0])
    assert torch.equal(adv, ret)


def test_unknown_names_list_the_registered_ones():
    with pytest.raises(ValueError, match="grpo") as err:
        alg.compute_advantages("grpoo", rewards(), MASK, INDEX, cfg())
    assert str(err.value).startswith("trainer.algorithm.advantage_estimator: 'grpoo' is not allowed; allowed: grpo")
    with pytest.raises(ValueError, match="regular") as err:
        alg.compute_policy_loss("regularr", MASK, MASK, MASK, MASK, cfg())
    assert str(err.value).startswith("trainer.algorithm.policy_loss_type: 'regularr' is not allowed; allowed: regular")


def test_registering_a_name_twice_fails_and_a_new_name_works():
    with pytest.raises(ValueError, match="already registered"):
        alg.register_advantage_estimator("grpo")(lambda *a, **k: None)

    @alg.register_policy_loss("test_only_linear")
    def linear(log_probs, old_log_probs, advantages, response_mask, config, rollout_logprobs=None):
        return -advantages * log_probs, {"clip_ratio": 0.0}

    try:
        assert "test_only_linear" in alg.POLICY_LOSSES and alg.POLICY_LOSSES.get("test_only_linear") is linear
        loss, metrics = alg.compute_policy_loss(
            "test_only_linear", torch.tensor([[-1.0, -2.0]]), torch.zeros(1, 2), torch.ones(1, 2),
            torch.ones(1, 2), cfg())
        close(loss, 1.5)  # (1 + 2) / 2 tokens
    finally:
        alg.POLICY_LOSSES.unregister("test_only_linear")
    assert "test_only_linear" not in alg.POLICY_LOSSES and "test_only_linear" not in alg.POLICY_LOSSES.names()


# Policy-loss fixture: ratios chosen so each clipping case appears once.
#   row 0: A = [+1, +1, -1], r = [1.5, 0.5, 0.5]
#   row 1: A = [-1, -1, (pad)], r = [1.5, 1.1, (pad, r = 9)]
LOSS_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
ADV = torch.tensor([[1.0, 1.0, -1.0], [-1.0, -1.0, 5.0]])
RATIOS = torch.tensor([[1.5, 0.5, 0.5], [1.5, 1.1, 9.0]])
OLD = torch.full((2, 3), -1.0)
NEW = OLD + torch.log(RATIOS)
# Per token, eps 0.2:
#   r=1.5, A=+1: -min(1.5, 1.2) = -1.2 (clipped)     r=0.5, A=+1: -min(0.5, 0.8) = -0.5
#   r=0.5, A=-1: -min(-0.5, -0.8) = 0.8 (clipped)    r=1.5, A=-1: -min(-1.5, -1.2) = 1.5
#   r=1.1, A=-1: -min(-1.1, -1.1) = 1.1
TOKEN_LOSSES = [[-1.2, -0.5, 0.8], [1.5, 1.1]]


def test_regular_token_mean_and_clip_ratio():
    loss, metrics = alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, cfg())
    close(loss, (-1.2 - 0.5 + 0.8 + 1.5 + 1.1) / 5)  # 0.34
    close(metrics["clip_ratio"], 2 / 5)


def test_regular_sequence_mean():
    loss, _ = alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, cfg(loss_reduction="sequence_mean"))
    close(loss, ((-1.2 - 0.5 + 0.8) / 3 + (1.5 + 1.1) / 2) / 2)  # (-0.3 + 1.3) / 2 = 0.5


def test_regular_seq_mean_token_sum_norm():
    c = cfg(loss_reduction="seq_mean_token_sum_norm", max_seq_len=4)
    loss, _ = alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, c)
    close(loss, 1.7 / (2 * 4))
    with pytest.raises(ValueError, match="max_seq_len"):
        alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, cfg(loss_reduction="seq_mean_token_sum_norm"))


def test_clip_higher_uses_separate_upper_bound():
    # eps_high 0.6: r=1.5, A=+1 is no longer clipped -> -1.5 ; the rest unchanged
    loss, metrics = alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, cfg(eps_clip_high=0.6))
    close(loss, (-1.5 - 0.5 + 0.8 + 1.5 + 1.1) / 5)
    close(metrics["clip_ratio"], 1 / 5)


def test_dual_clip_caps_negative_advantage_losses():
    old = torch.zeros(1, 3)
    new = torch.log(torch.tensor([[5.0, 5.0, 0.5]]))
    adv = torch.tensor([[-1.0, 1.0, -2.0]])
    mask = torch.ones(1, 3)
    # r=5, A=-1: regular -min(-5, -1.2) = 5, capped at min(3 * 1, 5) = 3
    # r=5, A=+1: A > 0, no cap: -min(5, 1.2) = -1.2
    # r=0.5, A=-2: regular -min(-1, -1.6) = 1.6 ; cap min(6, 1.6) = 1.6
    loss, metrics = alg.compute_policy_loss("dual_clip", new, old, adv, mask, cfg())
    close(loss, (3 - 1.2 + 1.6) / 3)
    close(metrics["clip_ratio"], 2 / 3)  # tokens 2 and 3 have the clipped term smaller
    regular, _ = alg.compute_policy_loss("regular", new, old, adv, mask, cfg())
    close(regular, (5 - 1.2 + 1.6) / 3)


def test_micro_batch_shares_add_up_to_the_mini_batch_loss():
    for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
        c = cfg(loss_reduction=reduction, max_seq_len=3)
        full, _ = alg.compute_policy_loss("regular", NEW, OLD, ADV, LOSS_MASK, c)
        parts = [
            alg.compute_policy_loss("regular", NEW[i:i + 1], OLD[i:i + 1], ADV[i:i + 1], LOSS_MASK[i:i + 1], c,
                                    num_sequences=2, num_tokens=LOSS_MASK.sum())[0]
            for i in range(2)
        ]
        close(sum(parts), full)


def test_kl_estimators():
    ref = torch.tensor([[-1.0, -1.0]])
    lp = ref + torch.tensor([[0.5, -1.0]])  # d = log_probs - ref = [0.5, -1]
    close(alg.compute_approx_kl(lp, ref, "k1"), [[0.5, -1.0]])
    close(alg.compute_approx_kl(lp, ref, "abs"), [[0.5, 1.0]])
    close(alg.compute_approx_kl(lp, ref, "k2"), [[0.125, 0.5]])                  # d^2 / 2
    close(alg.compute_approx_kl(lp, ref, "k3"), [[math.exp(-0.5) - 0.5, math.e - 2]])  # e^-d + d - 1
    with pytest.raises(ValueError, match="k3"):
        alg.compute_approx_kl(lp, ref, "k4")


def test_kl_masked_positions_are_zero_even_when_not_finite():
    lp = torch.tensor([[0.0, float("nan")]])
    kl = alg.compute_approx_kl(lp, torch.zeros(1, 2), "k1", torch.tensor([[1.0, 0.0]]))
    assert kl.tolist() == [[0.0, 0.0]]


def test_kl_loss_is_mean_of_per_sequence_means():
    ref = torch.zeros(2, 2)
    lp = torch.tensor([[1.0, 3.0], [2.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    # k1: row means (1 + 3) / 2 = 2 and 2 / 1 = 2 -> 2
    close(alg.compute_kl_loss(lp, ref, mask, cfg(kl_estimator_type="k1")), 2.0)


def test_entropy():
    logits = torch.tensor([[[0.0, 0.0], [0.0, math.log(3.0)]]])
    # uniform over 2: ln 2 ; probs (1/4, 3/4): -(1/4 ln 1/4 + 3/4 ln 3/4)
    h2 = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    close(alg.compute_entropy(logits), [[math.log(2.0), h2]])
    close(alg.masked_entropy(logits, torch.tensor([[1.0, 0.0]])), math.log(2.0))


def test_masked_mean_and_whiten():
    x = torch.tensor([[1.0, 2.0, 99.0], [3.0, 4.0, 99.0]])
    m = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])
    close(alg.masked_mean(x, m), 2.5)
    close(alg.masked_mean(x, m, dim=-1), [1.5, 3.5])
    close(alg.masked_mean(x, torch.zeros_like(m)), 0.0)
    # entries 1..4: mean 2.5, unbiased var (2.25 + 0.25 + 0.25 + 2.25) / 3 = 5/3
    w = alg.masked_whiten(x, m)
    s = math.sqrt(5 / 3 + 1e-8)
    close(w[m == 1], [-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s])


def test_reinforce_plus_plus_discounts_resets_after_eos_and_whitens():
    r = torch.tensor([[0.0, 2.0], [1.0, 5.0]])
    m = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv, ret = alg.compute_advantages("reinforce++", r, m, np.array([0, 1]), cfg(gamma=0.5))
    # row 0: G1 = 2, G0 = 0 + 0.5 * 2 = 1 ; row 1: G1 = 5 (padding), the return restarts: G0 = 1
    close(ret, [[1.0, 2.0], [1.0, 5.0]])
    # whitened over the masked returns 1, 2, 1: mean 4/3, unbiased var (1/9 + 4/9 + 1/9) / 2 = 1/3
    s = math.sqrt(1 / 3 + 1e-8)
    close(adv, [[(-1 / 3) / s, (2 / 3) / s], [(-1 / 3) / s, 0.0]])


def test_gae_advantages_and_returns():
    r = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    v = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    m = torch.ones(2, 2)
    adv, ret = alg.compute_advantages("gae", r, m, np.array([0, 1]), cfg(gamma=0.5, lambd=0.5), values=v)
    # row 0: t=1: delta = 1 + 0 - 2 = -1, A1 = -1 ; t=0: delta = 0 + 0.5 * 2 - 1 = 0, A0 = 0 + 0.25 * -1
    # row 1: t=1: delta = 1, A1 = 1 ; t=0: delta = 0, A0 = 0.25 ; returns = A + V
    close(ret, [[-0.25 + 1, -1 + 2], [0.25, 1.0]])
    # raw A = (-0.25, -1, 0.25, 1): mean 0, unbiased var (2 * 0.0625 + 2 * 1) / 3
    s = math.sqrt(2.125 / 3 + 1e-8)
    close(adv, [[-0.25 / s, -1 / s], [0.25 / s, 1 / s]])
    with pytest.raises(ValueError, match="values"):
        alg.compute_advantages("gae", r, m, np.array([0, 1]), cfg())


def test_gspo_uses_the_sequence_ratio_and_token_gradients():
    old = torch.zeros(2, 3)
    # row 0: token ratios 2, 0.5, 1 -> mean log-ratio 0 -> s = 1 for every token
    # row 1: log-ratio 0.3 on its only token (0.3, then padding 5.0) -> s = e^0.3 = 1.3499 > 1.2
    new = torch.tensor([[math.log(2.0), -math.log(2.0), 0.0], [0.3, 5.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    adv = torch.ones(2, 3)
    loss, metrics = alg.compute_policy_loss("gspo", new, old, adv, mask, cfg())
    # row 0: -min(1, 1) = -1 on 3 tokens ; row 1: -min(1.35, 1.2) = -1.2, clipped ; token mean of 4
    close(loss, (-3 - 1.2) / 4)
    close(metrics["clip_ratio"], 1 / 4)
    loss.backward()
    # d/d logp_t of -s * exp(logp_t - sg(logp_t)) * A = -s * A on unclipped tokens, 0 on clipped
    close(new.grad, [[-0.25, -0.25, -0.25], [0.0, 0.0, 0.0]])


def test_cispo_clips_the_weight_not_the_gradient():
    old = torch.full((1, 3), -1.0)
    ratios = [2.0, 0.5, 1.1]
    new = (old + torch.log(torch.tensor([ratios]))).requires_grad_(True)
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    c = cfg(cispo=SimpleNamespace(cispo_eps_clip_low=0.2, cispo_eps_clip_high=0.3))
    loss, metrics = alg.compute_policy_loss("cispo", new, old, adv, torch.ones(1, 3), c)
    # weights clamp(r, 0.8, 1.3) = 1.3, 0.8, 1.1 ; loss = -A * w * logp
    lp = [-1 + math.log(2.0), -1 - math.log(2.0), -1 + math.log(1.1)]
    close(loss, (-1 * 1.3 * lp[0] + 1 * 0.8 * lp[1] - 2 * 1.1 * lp[2]) / 3)
    close(metrics["clip_ratio"], 2 / 3)
    loss.backward()
    close(new.grad, [[-1.3 / 3, 0.8 / 3, -2.2 / 3]])  # every token keeps a gradient


def test_value_loss_clipped():
    values = torch.tensor([[1.0, 2.0, 50.0]])
    old = torch.tensor([[0.5, 2.0, 0.0]])
    returns = torch.tensor([[2.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    loss, clipfrac = alg.compute_value_loss(values, old, returns, mask, value_clip=0.2)
    # token 0: clipped V = 0.5 + 0.2 = 0.7 -> (0.7 - 2)^2 = 1.69 > (1 - 2)^2 = 1 -> 1.69 (clipped)
    # token 1: V = V_old -> both 1 -> 1 ; 0.5 * mean(1.69, 1)
    close(loss, 0.5 * (1.69 + 1) / 2)
    close(clipfrac, 0.5)
    plain, none = alg.compute_value_loss(values, old, returns, mask, value_clip=None)
    close(plain, 0.5 * (1 + 1) / 2)
    assert none is None


def test_kl_controllers():
    fixed = alg.get_kl_controller(SimpleNamespace(kl_loss_coef=0.5, kl_ctrl=SimpleNamespace(type="fixed")))
    fixed.update(10.0, 4)
    assert fixed.value == 0.5
    ctrl = alg.get_kl_controller(SimpleNamespace(
        kl_loss_coef=0.1, kl_ctrl=SimpleNamespace(type="adaptive", kl_target=0.1, horizon=100)))
    ctrl.update(current=0.15, n_steps=10)  # error clip(0.5) = 0.2 -> x (1 + 0.2 * 10 / 100)
    close(ctrl.value, 0.1 * 1.02)
    ctrl.update(current=0.09, n_steps=10)  # error -0.1 -> x (1 - 0.1 * 10 / 100)
    close(ctrl.value, 0.1 * 1.02 * 0.99)
    with pytest.raises(ValueError, match="horizon"):
        alg.AdaptiveKLController(0.1, 0.1, 0)


def test_kl_in_reward():
    ctrl = alg.FixedKLController(0.5)
    ref = torch.zeros(2, 2)
    lp = torch.tensor([[0.2, 0.4], [0.6, 9.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    new, metrics = alg.apply_kl_penalty(rewards, lp, ref, mask, ctrl, "k1")
    close(new, [[-0.1, 1.0 - 0.2], [-0.3, 0.0]])  # r - 0.5 * kl, kl zero on padding
    close(metrics["avg_kl"], (0.3 + 0.6) / 2)
    close(metrics["avg_kl_max"], (0.4 + 0.6) / 2)
    assert metrics["kl_loss_coef"] == 0.5


def test_every_builtin_name_has_a_registered_function_the_config_accepts():
    from skyrl_core.choices import AdvantageEstimator, PolicyLoss, values
    from skyrl_core.config import load_config

    for registry, choice, key in ((alg.ADVANTAGE_ESTIMATORS, AdvantageEstimator, "advantage_estimator"),
                                  (alg.POLICY_LOSSES, PolicyLoss, "policy_loss_type")):
        registered = registry.registered()
        assert registry.names()[: len(values(choice))] == list(values(choice))  # built-ins first
        for name in values(choice):
            assert name in registry and callable(registered.get(name)), name
            assert registry.get(name) is registered[name]
            algo = load_config(None, {f"trainer.algorithm.{key}": name}).trainer.algorithm
            assert getattr(algo, key) == name and type(getattr(algo, key)) is str
    # each built-in runs when the config names it
    for name in values(AdvantageEstimator):
        algo = load_config(None, {"trainer.algorithm.advantage_estimator": name}).trainer.algorithm
        adv, ret = alg.compute_advantages(algo.advantage_estimator, rewards(), MASK, INDEX, algo,
                                          values=torch.zeros_like(MASK))
        assert adv.shape == ret.shape == MASK.shape and torch.isfinite(adv).all(), name
    for name in values(PolicyLoss):  # with the sampler's log-probs, as the trainer always passes them
        algo = load_config(None, {"trainer.algorithm.policy_loss_type": name}).trainer.algorithm
        loss, metrics = alg.compute_policy_loss(algo.policy_loss_type, NEW, OLD, ADV, LOSS_MASK, algo,
                                                rollout_logprobs=OLD - 0.1)
        key = "importance_ratio" if name == "importance_sampling" else "clip_ratio"  # SkyRL's metric names
        assert loss.dim() == 0 and torch.isfinite(loss) and key in metrics, name


def test_every_closed_choice_is_accepted_by_the_config_and_handled_by_the_functions():
    from skyrl_core.choices import (
        KLController,
        KLEstimator,
        LossReduction,
        SequenceMaskMetric,
        TISRatioType,
        values,
    )
    from skyrl_core.config import ConfigError, load_config

    def algo(key, value):
        a = load_config(None, {f"trainer.algorithm.{key}": value}).trainer.algorithm
        for part in key.split(".")[:-1]:
            a = getattr(a, part)
        got = getattr(a, key.split(".")[-1])
        assert got == value and type(got) is str, (key, value)  # use_enum_values: plain strings
        return load_config(None, {f"trainer.algorithm.{key}": value}).trainer.algorithm

    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]])
    for reduction in values(LossReduction):
        a = algo("loss_reduction", reduction)
        assert torch.isfinite(alg.reduce_loss(per_token, LOSS_MASK, a.loss_reduction, max_seq_len=3)), reduction
    lp, ref = torch.tensor([[-0.5, -1.0, -2.0]]), torch.tensor([[-1.0, -1.0, -0.5]])
    for estimator in values(KLEstimator):
        a = algo("kl_estimator_type", estimator)
        kl = alg.compute_approx_kl(lp, ref, a.kl_estimator_type)
        assert kl.shape == lp.shape and torch.isfinite(kl).all() and kl[0, 1] == 0, estimator
        assert torch.isfinite(alg.compute_kl_loss(lp, ref, torch.ones_like(lp), a)), estimator
    for kind in values(KLController):
        controller = alg.get_kl_controller(algo("kl_ctrl.type", kind))
        assert controller.value == pytest.approx(0.001), kind  # starts at kl_loss_coef
    rollout = OLD - 0.1
    for ratio_type in values(TISRatioType):
        a = algo("off_policy_correction.tis_ratio_type", ratio_type)
        weight, _, metrics = alg.compute_off_policy_correction(OLD, rollout, LOSS_MASK, a)
        assert weight is not None and torch.isfinite(weight).all() and metrics, ratio_type
    for metric in values(SequenceMaskMetric):
        a = algo("off_policy_correction.sequence_mask_metric", metric)
        _, mask, metrics = alg.compute_off_policy_correction(OLD, rollout, LOSS_MASK, a)
        assert mask.shape == LOSS_MASK.shape and metrics, metric
    # and nothing outside the enums
    for key in ("loss_reduction", "kl_estimator_type", "kl_ctrl.type"):
        with pytest.raises(ConfigError, match=key.split(".")[-1]):
            load_config(None, {f"trainer.algorithm.{key}": "nope"})


def test_the_real_job_config_drives_the_functions():
    from skyrl_core.config import JobConfig

    algo = JobConfig().trainer.algorithm
    adv, _ = alg.compute_advantages(algo.advantage_estimator, rewards(), MASK, INDEX, algo)
    loss, metrics = alg.compute_policy_loss(algo.policy_loss_type, NEW, OLD, ADV, LOSS_MASK, algo)
    close(loss, 0.34)  # the same numbers as with the SimpleNamespace defaults above
    assert "clip_ratio" in metrics
