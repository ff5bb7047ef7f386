"""SkyRL's off-policy correction (truncated importance sampling and masks) against hand-worked values.

Two samples, three response tokens, the second sample one token shorter. The trainer's "old"
log-probs minus the sampler's are chosen so the per-token ratios ``r = pi_old / pi_rollout`` are

    sample 0: 2,   1,   0.5          (product 1)
    sample 1: 4,   1.5, [padding]    (product 6)

The policy equals the old policy (PPO ratio 1, nothing clipped), so the regular loss per token
is ``-A`` and any change comes from the correction alone.
"""

import math
from types import SimpleNamespace

import pytest
import torch

from skyrl_engine import algorithms as alg

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -1.2, -0.7]])
ROLLOUT = OLD - torch.tensor([[math.log(2.0), 0.0, math.log(0.5)], [math.log(4.0), math.log(1.5), 5.0]])
ADVANTAGES = torch.tensor([[1.0, 1.0, 1.0], [-1.0, 2.0, 0.0]])
TOKENS = 5.0  # the token_mean normaliser: the full response mask, also after tokens are dropped


def cfg(loss_reduction="token_mean", **correction):
    return SimpleNamespace(eps_clip_low=0.2, eps_clip_high=0.2, loss_reduction=loss_reduction,
                           off_policy_correction=SimpleNamespace(**correction))


def loss_and_grad(config):
    log_probs = OLD.clone().requires_grad_(True)
    loss, metrics = alg.compute_policy_loss("regular", log_probs, OLD, ADVANTAGES, MASK, config, rollout_logprobs=ROLLOUT)
    loss.backward()
    return loss.item(), log_probs.grad * MASK, metrics


def test_off_by_default_changes_nothing():
    weight, mask, metrics = alg.compute_off_policy_correction(OLD, ROLLOUT, MASK, cfg())
    assert weight is None and mask is MASK and metrics == {}
    loss, _, metrics = loss_and_grad(cfg())
    # -(1 + 1 + 1 - 1 + 2) / 5
    assert loss == pytest.approx(-4.0 / TOKENS)
    assert set(metrics) == {"clip_ratio"}


def test_token_tis_weighs_each_token_by_its_capped_ratio():
    loss, grad, metrics = loss_and_grad(cfg(tis_ratio_type="token", token_tis_ratio_clip_high=2.0))
    # weights min(r, 2): [2, 1, 0.5], [2, 1.5]; loss = -sum(A * w) / 5 = -(2 + 1 + 0.5 - 2 + 3) / 5
    assert loss == pytest.approx(-4.5 / TOKENS)
    # the weight is a constant: d loss / d log_prob = -A * w * ratio(=1) / 5
    torch.testing.assert_close(grad, torch.tensor([[-2.0, -1.0, -0.5], [2.0, -3.0, 0.0]]) / TOKENS)
    assert metrics["tis_token_clip_high_ratio"] == pytest.approx(1 / 5)  # only the 4 is above 2
    assert metrics["clip_ratio"] == 0.0


def test_sequence_tis_weighs_each_sequence_by_its_capped_product():
    loss, grad, metrics = loss_and_grad(cfg(tis_ratio_type="sequence", sequence_tis_ratio_clip_high=5.0))
    # products 1 and 6 -> weights 1 and 5; loss = -(3 * 1 + (-1 + 2) * 5) / 5
    assert loss == pytest.approx(-8.0 / TOKENS)
    torch.testing.assert_close(grad, torch.tensor([[-1.0, -1.0, -1.0], [5.0, -10.0, 0.0]]) / TOKENS)
    assert metrics["tis_seq_clip_high_ratio"] == pytest.approx(1 / 2)


def test_sequence_tis_with_sequence_mean():
    loss, _, _ = loss_and_grad(cfg("sequence_mean", tis_ratio_type="sequence", sequence_tis_ratio_clip_high=5.0))
    # per-sequence token means: -3 / 3 and -(5 / 2), averaged over the 2 sequences
    assert loss == pytest.approx((-1.0 - 2.5) / 2)


def test_is_ratio_metrics_use_skyrls_definitions():
    _, _, metrics = alg.compute_off_policy_correction(OLD, ROLLOUT, MASK, cfg(tis_ratio_type="token"))
    assert metrics["is_ratio_mean"] == pytest.approx(9.0 / 5)  # (2 + 1 + 0.5 + 4 + 1.5) / 5
    # std, max and min over r * mask, the padding's 0 included: [2, 1, 0.5, 4, 1.5, 0] has mean 1.5,
    # squared deviations summing to 10, unbiased variance 10 / 5 = 2
    assert metrics["is_ratio_std"] == pytest.approx(math.sqrt(2.0))
    assert metrics["is_ratio_max"] == pytest.approx(4.0)
    assert metrics["is_ratio_min"] == 0.0


def test_product_sequence_mask_drops_a_sequence_but_keeps_the_normaliser():
    loss, grad, metrics = loss_and_grad(cfg(sequence_mask_metric="product", product_mask_low=0.5, product_mask_high=2.0))
    # product 6 > 2 drops sample 1; loss = -3 / 5 (still divided by all 5 tokens)
    assert loss == pytest.approx(-3.0 / TOKENS)
    assert grad[1].abs().sum() == 0
    assert metrics["product_sequence_mask_masked_ratio"] == pytest.approx(0.5)
    assert metrics["product_sequence_mask_over_high_ratio"] == pytest.approx(0.5)
    assert metrics["product_sequence_mask_under_low_ratio"] == 0.0


def test_geometric_sequence_mask():
    _, mask, metrics = alg.compute_off_policy_correction(
        OLD, ROLLOUT, MASK, cfg(sequence_mask_metric="geometric", geo_mask_low=0.99, geo_mask_high=1.01))
    # geometric means: 1^(1/3) = 1 (kept), 6^(1/2) = 2.449 (over)
    torch.testing.assert_close(mask, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))
    assert metrics["geo_sequence_mask_over_high_ratio"] == pytest.approx(0.5)


def test_outlier_mask_drops_sequences_with_any_outlier_token():
    _, mask, metrics = alg.compute_off_policy_correction(
        OLD, ROLLOUT, MASK, cfg(outlier_token_is_threshold_low=0.6, outlier_token_is_threshold_high=3.0))
    # sample 0 has 0.5 < 0.6, sample 1 has 4 > 3; the padding's e^5 does not count
    assert mask.sum() == 0
    assert metrics["outlier_seq_masked_ratio"] == pytest.approx(1.0)
    assert metrics["outlier_seq_over_high_ratio"] == pytest.approx(0.5)
    assert metrics["outlier_seq_under_low_ratio"] == pytest.approx(0.5)


def test_token_mask_then_token_tis():
    loss, _, metrics = loss_and_grad(cfg(tis_ratio_type="token", token_mask_is_threshold_low=0.6,
                                         token_mask_is_threshold_high=3.0))
    # drops the 0.5 and the 4; kept weights [2, 1], [1.5]; loss = -(2 + 1 + 2 * 1.5) / 5
    assert loss == pytest.approx(-6.0 / TOKENS)
    assert metrics["token_mask_ratio"] == pytest.approx(2 / 5)
    assert metrics["tis_token_clip_high_ratio"] == 0.0  # among the 3 kept tokens none is above 2


def test_the_real_job_config_turns_it_on():
    from skyrl_core.config import load_config

    algo = load_config("quickstart", ["trainer.algorithm.off_policy_correction.tis_ratio_type=token"]).trainer.algorithm
    loss, _, metrics = loss_and_grad(algo)
    assert loss == pytest.approx(-4.5 / TOKENS)  # SkyRL's default cap 2.0, as in the token test
    assert "tis_token_clip_high_ratio" in metrics


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("tis_ratio_type", "tokens", "tis_ratio_type: 'tokens' is not allowed; allowed: null (off), token, sequence"),
    ("sequence_mask_metric", "mean", "sequence_mask_metric: 'mean' is not allowed; allowed: null (off), product, "),
    ("token_tis_ratio_clip_high", 0, "token_tis_ratio_clip_high: 0 is not allowed"),
])
def test_config_rejects_bad_values_in_one_line(key, value, expected):
    from skyrl_core.config import ConfigError, load_config

    with pytest.raises(ConfigError) as err:
        load_config("quickstart", {f"trainer.algorithm.off_policy_correction.{key}": value})
    assert len(err.value.problems) == 1
    assert err.value.problems[0].startswith(f"trainer.algorithm.off_policy_correction.{expected}")


def test_config_rejects_an_inverted_band():
    from skyrl_core.config import load_config

    cfg_ = load_config("quickstart", ["trainer.algorithm.off_policy_correction.product_mask_low=3"])
    assert cfg_.problems(check_files=False) == [
        "trainer.algorithm.off_policy_correction.product_mask_low: 3.0 is not below product_mask_high=2.0; "
        "it must be smaller"]
