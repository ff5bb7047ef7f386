"""The new losses that take another path through the trainer, and maxrl, through the real trainer: one step of the
tiny model in this process (``engine_runs.train_in_process``), two update passes so the pre-update log-probs differ
from the current ones. The sampler's log-probs (rollout_is, dppo, CISPO's sampler anchor), reduction-scaled
advantages and a plain sum (clip_cov, kl_cov with seq_mean_token_sum_norm, cross_entropy) with the trainer's
mini-batch normalisers. The run store's first metrics row carries a finite policy loss and the loss's own metric
under SkyRL's name. ~25 s here for the seven runs (sapo and importance_sampling take the PPO family's path).
"""

import json
import math

import pytest
from engine_runs import train_in_process

CASES = {  # name -> (overrides, a metric the loss reports under policy/loss_metrics/)
    "rollout_is": (["trainer.algorithm.policy_loss_type=rollout_is"], "clip_ratio"),
    "dppo": (["trainer.algorithm.policy_loss_type=dppo", "trainer.algorithm.dppo.dppo_type=binary_kl"], "clip_ratio"),
    "clip_cov": (["trainer.algorithm.policy_loss_type=clip_cov", "trainer.algorithm.clip_cov.clip_cov_lb=-1.0"],
                 "clip_ratio"),
    "kl_cov": (["trainer.algorithm.policy_loss_type=kl_cov", "trainer.algorithm.loss_reduction=seq_mean_token_sum_norm",
                "trainer.algorithm.max_seq_len=8"], "clip_ratio"),
    "cross_entropy": (["trainer.algorithm.policy_loss_type=cross_entropy"], "clip_ratio"),
    "cispo_rollout": (["trainer.algorithm.policy_loss_type=cispo", "trainer.algorithm.cispo.cispo_anchor=rollout"],
                      "cispo/ratio_mean"),
    "maxrl": (["trainer.algorithm.advantage_estimator=maxrl"], "clip_ratio"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_one_step_trains_and_reports_the_loss_metrics(name, tmp_path, tiny_model_dir):
    overrides, metric = CASES[name]
    run = train_in_process(tmp_path, f"loss-{name.replace('_', '-')}", tiny_model_dir, 1,
                           "trainer.update_epochs_per_batch=2", *overrides)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    (row,) = [r for r in rows if r.get("step") == 1]
    assert math.isfinite(row["policy/policy_loss"]), row
    assert math.isfinite(row[f"policy/loss_metrics/{metric}"]), sorted(row)
