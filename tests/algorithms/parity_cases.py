"""Shared by the SkyRL parity tests: the random cases, our side of the computation, the oracle runs.

    .venv/bin/python tests/algorithms/parity_cases.py --record [0.3.0|0.4.0 ...]

re-records ``skyrl_<version>_outputs.npz`` (inputs and SkyRL's outputs for seed 0) with that release's oracle env
(``scripts/skyrl_oracle_env.sh <version>``), which the fast test_parity_skyrl_recorded.py compares against without
installing SkyRL. Both releases register the same losses and estimators; 0.4.0 adds CISPO's ``cispo_anchor`` and its
ratio metrics (``MORE_LOSS_CASES_040``).
"""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from skyrl_engine import algorithms as alg

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
DRIVER = HERE / "skyrl_oracle_driver.py"
VERSIONS = ("0.3.0", "0.4.0")
RECORDED = {v: HERE / f"skyrl_{v}_outputs.npz" for v in VERSIONS}
TOLERANCE = 1e-6  # absolute, every quantity (advantages included)
LOSS_RTOL = 1e-5  # relative, losses: the bar; every loss here also meets TOLERANCE
# the losses beside the PPO family: case -> the loss, its settings, an off-policy correction; all get the sampler's
# log-probs unless rollout is False (SkyRL's names and meanings; the same cases run on both releases)
MORE_LOSS_CASES = {
    "sapo": {"loss": "sapo"},
    "sapo_tis": {"loss": "sapo", "off_policy": {"tis_ratio_type": "token", "token_tis_ratio_clip_high": 1.5}},
    "rollout_is": {"loss": "rollout_is"},
    "rollout_is_masks": {"loss": "rollout_is", "off_policy": {"outlier_token_is_threshold_low": 0.05,
                                                              "outlier_token_is_threshold_high": 20.0}},
    "dppo_tv": {"loss": "dppo", "dppo_type": "binary_tv"},
    "dppo_kl": {"loss": "dppo", "dppo_type": "binary_kl"},
    "dppo_old": {"loss": "dppo", "dppo_type": "binary_tv", "rollout": False},
    "clip_cov": {"loss": "clip_cov"},
    "kl_cov": {"loss": "kl_cov"},
    "cross_entropy": {"loss": "cross_entropy"},
    "importance_sampling": {"loss": "importance_sampling"},
}
MORE_LOSS_CASES_040 = {  # SkyRL 0.4.0 only: CISPO anchored on the sampler, and CISPO's ratio metrics
    "cispo_old": {"loss": "cispo"},
    "cispo_rollout": {"loss": "cispo", "cispo_anchor": "rollout"},
}
REDUCTIONS = ("token_mean", "sequence_mean", "seq_mean_token_sum_norm")
SPEC = dict(
    eps_clip_low=0.2, eps_clip_high=0.28, clip_ratio_c=3.0, value_clip=0.2, kl_loss_coef=0.05,
    cispo_eps_clip_low=0.1, cispo_eps_clip_high=0.15, gamma=0.95, lambd=0.9, max_seq_len=24,
    kl_target=0.1, kl_horizon=50,
    sapo_tau_pos=1.0, sapo_tau_neg=1.05, kl_cov_frac=0.2, ppo_kl_coef=1.0, dppo_delta_low=0.05, dppo_delta_high=0.05,
    # clip_cov in SkyRL's units (advantages already divided by the reduction): lb 0 takes every positive covariance
    clip_cov_ratio=0.2, clip_cov_lb=0.0, clip_cov_ub=5.0, clip_cov_seed=7,
    more_loss_cases=MORE_LOSS_CASES, **{"more_loss_cases_0.4": MORE_LOSS_CASES_040},
    # trainer.algorithm.off_policy_correction cases, each with the regular loss (SkyRL's names and meanings)
    off_policy_cases={
        "tis_token": {"tis_ratio_type": "token", "token_tis_ratio_clip_high": 1.5},
        "tis_sequence": {"tis_ratio_type": "sequence", "sequence_tis_ratio_clip_high": 3.0},
        "masks": {"tis_ratio_type": "token", "sequence_mask_metric": "geometric", "geo_mask_low": 0.9,
                  "geo_mask_high": 1.1, "outlier_token_is_threshold_low": 0.05,
                  "outlier_token_is_threshold_high": 20.0, "token_mask_is_threshold_low": 0.3,
                  "token_mask_is_threshold_high": 3.0},
        "product_mask": {"tis_ratio_type": "sequence", "sequence_mask_metric": "product",
                         "product_mask_low": 0.5, "product_mask_high": 2.0},
    },
)
OFF_POLICY_REDUCTIONS = ("token_mean", "sequence_mean")


def make_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Random float32 batch: 14 samples in groups of 4, 4, 3, 2, 1; right-padded lengths 2..16; ``binary_rewards``
    0/1 on each response's last token (drawn last, so the other arrays are what they were before it)."""
    rng = np.random.default_rng(seed)
    index = np.array(["p0"] * 4 + ["p1"] * 4 + ["p2"] * 3 + ["p3"] * 2 + ["p4"])
    batch, width = len(index), 16
    lengths = rng.integers(2, width + 1, size=batch)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)

    def f32(x):
        return np.asarray(x, dtype=np.float32)

    old = f32(-rng.uniform(0.05, 3.0, (batch, width)))
    arrays = dict(
        index=index,
        mask=mask,
        rewards=f32(rng.normal(size=(batch, width)) * mask),
        values=f32(rng.normal(size=(batch, width)) * mask),
        old_values=f32(rng.normal(size=(batch, width)) * mask),
        returns=f32(rng.normal(size=(batch, width)) * mask),
        advantages=f32(rng.normal(size=(batch, width)) * mask),
        old_log_probs=old,
        # mostly small policy drift, plus ~10% tokens whose ratio exceeds clip_ratio_c (dual-clip caps)
        log_probs=f32(old + rng.normal(scale=0.3, size=(batch, width)) + 1.5 * (rng.random((batch, width)) < 0.1)),
        ref_log_probs=f32(old + rng.normal(scale=0.5, size=(batch, width))),
        logits=f32(rng.normal(scale=3.0, size=(batch, width, 11))),
        # the sampler's log-probs: near the old ones, ~5% tokens far off (outlier and token masks)
        rollout_log_probs=f32(old + rng.normal(scale=0.3, size=(batch, width))
                              + 3.0 * rng.choice([-1.0, 1.0], size=(batch, width)) * (rng.random((batch, width)) < 0.05)),
    )
    binary = np.zeros((batch, width), dtype=np.float32)
    binary[np.arange(batch), lengths - 1] = rng.integers(0, 2, size=batch)
    return {**arrays, "binary_rewards": binary}


def ours(inputs: dict[str, np.ndarray], version: str = "0.3.0") -> dict[str, np.ndarray]:
    """The driver's outputs for SkyRL ``version``, computed with skyrl_engine.algorithms."""
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if k != "index"}
    index, mask = inputs["index"], t["mask"]
    s = SimpleNamespace(**SPEC)
    out: dict[str, torch.Tensor] = {}

    def algo(cispo_anchor="old", dppo_type="binary_tv", **kw):
        base = dict(SPEC, cispo=SimpleNamespace(cispo_eps_clip_low=s.cispo_eps_clip_low,
                                                cispo_eps_clip_high=s.cispo_eps_clip_high, cispo_anchor=cispo_anchor),
                    sapo=SimpleNamespace(tau_pos=s.sapo_tau_pos, tau_neg=s.sapo_tau_neg),
                    clip_cov=SimpleNamespace(clip_ratio=s.clip_cov_ratio, clip_cov_lb=s.clip_cov_lb,
                                             clip_cov_ub=s.clip_cov_ub),
                    kl_cov=SimpleNamespace(kl_cov_frac=s.kl_cov_frac, ppo_kl_coef=s.ppo_kl_coef),
                    dppo=SimpleNamespace(dppo_type=dppo_type, delta_low=s.dppo_delta_low, delta_high=s.dppo_delta_high))
        base.update(kw)
        return SimpleNamespace(**base)

    for norm in (True, False):
        adv, ret = alg.compute_advantages("grpo", t["rewards"], mask, index, algo(grpo_norm_by_std=norm))
        out[f"adv/grpo/norm={norm}"], out[f"ret/grpo/norm={norm}"] = adv, ret
    for name in ("rloo", "reinforce++", "gae", "maxrl"):
        out[f"adv/{name}"], out[f"ret/{name}"] = alg.compute_advantages(
            name, t["rewards"], mask, index, algo(), values=t["values"])
    out["adv/maxrl/binary"], out["ret/maxrl/binary"] = alg.compute_advantages(
        "maxrl", t["binary_rewards"], mask, index, algo())

    for loss_name in ("regular", "dual_clip", "gspo", "cispo"):
        for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
            log_probs = t["log_probs"].clone().requires_grad_(True)
            loss, metrics = alg.compute_policy_loss(
                loss_name, log_probs, t["old_log_probs"], t["advantages"], mask, algo(loss_reduction=reduction))
            loss.backward()
            key = f"{loss_name}/{reduction}"
            out[f"loss/{key}"], out[f"grad/{key}"] = loss.detach(), log_probs.grad
            out[f"clip_ratio/{key}"] = torch.tensor(metrics["clip_ratio"])

    for case, correction in SPEC["off_policy_cases"].items():
        for reduction in OFF_POLICY_REDUCTIONS:
            log_probs = t["log_probs"].clone().requires_grad_(True)
            config = algo(loss_reduction=reduction, off_policy_correction=SimpleNamespace(**correction))
            loss, metrics = alg.compute_policy_loss("regular", log_probs, t["old_log_probs"], t["advantages"], mask,
                                                    config, rollout_logprobs=t["rollout_log_probs"])
            loss.backward()
            key = f"off_policy/{case}/{reduction}"
            out[f"{key}/loss"], out[f"{key}/grad"] = loss.detach(), log_probs.grad
            for name, value in metrics.items():
                out[f"{key}/{name}"] = torch.tensor(value)

    cases = dict(MORE_LOSS_CASES, **(MORE_LOSS_CASES_040 if version != "0.3.0" else {}))
    for case, c in cases.items():
        for reduction in REDUCTIONS:
            extra = {k: c[k] for k in ("cispo_anchor", "dppo_type") if k in c}
            if "off_policy" in c:
                extra["off_policy_correction"] = SimpleNamespace(**c["off_policy"])
            log_probs = t["log_probs"].clone().requires_grad_(True)
            torch.manual_seed(s.clip_cov_seed)
            loss, metrics = alg.compute_policy_loss(
                c["loss"], log_probs, t["old_log_probs"], t["advantages"], mask, algo(loss_reduction=reduction, **extra),
                rollout_logprobs=t["rollout_log_probs"] if c.get("rollout", True) else None)
            loss.backward()
            key = f"more_loss/{case}/{reduction}"
            out[f"{key}/loss"], out[f"{key}/grad"] = loss.detach(), log_probs.grad
            for name, value in metrics.items():
                out[f"{key}/{name}"] = torch.tensor(value)

    for kind in ("k1", "k2", "k3", "abs"):
        out[f"kl/{kind}"] = alg.compute_approx_kl(t["log_probs"], t["ref_log_probs"], kind, mask)
        out[f"kl_unmasked/{kind}"] = alg.compute_approx_kl(t["log_probs"], t["ref_log_probs"], kind)
        out[f"kl_loss/{kind}"] = alg.compute_kl_loss(t["log_probs"], t["ref_log_probs"], mask,
                                                     algo(kl_estimator_type=kind))

    out["whiten"] = alg.masked_whiten(t["values"], mask)
    out["masked_mean"] = alg.masked_mean(t["values"], mask)
    out["masked_mean_rows"] = alg.masked_mean(t["values"], mask, dim=-1)
    out["value_loss"], clipfrac = alg.compute_value_loss(
        t["values"], t["old_values"], t["returns"], mask, value_clip=s.value_clip)
    out["value_clipfrac"] = torch.tensor(clipfrac)
    out["value_loss/no_clip"], _ = alg.compute_value_loss(t["values"], t["old_values"], t["returns"], mask, None)
    out["entropy"] = alg.compute_entropy(t["logits"])

    for ctrl_type in ("fixed", "adaptive"):
        config = algo(kl_ctrl=SimpleNamespace(type=ctrl_type, kl_target=s.kl_target, horizon=s.kl_horizon))
        controller = alg.get_kl_controller(config)
        rewards = t["rewards"].clone()
        for step in range(3):
            rewards, metrics = alg.apply_kl_penalty(
                rewards, t["log_probs"] + 0.5 * step, t["ref_log_probs"], mask, controller, "k3")
            for name, value in metrics.items():
                out[f"kl_reward/{ctrl_type}/{step}/{name}"] = torch.tensor(value)
        out[f"kl_reward/{ctrl_type}/rewards"] = rewards
        out[f"kl_reward/{ctrl_type}/final_coef"] = torch.tensor(controller.value)
    return {k: v.detach().numpy() for k, v in out.items()}


def oracle_variable(version: str) -> str:
    """The variable naming a ready oracle python for ``version``: SKYRL_ORACLE_PYTHON (0.3.0), SKYRL_ORACLE_PYTHON_040."""
    return "SKYRL_ORACLE_PYTHON" if version == "0.3.0" else "SKYRL_ORACLE_PYTHON_" + version.replace(".", "")[:3]


def build_oracle(version: str = "0.3.0") -> str:
    """Path of SkyRL ``version``'s oracle env python, building the env first if needed (raises on failure)."""
    if os.environ.get(oracle_variable(version)):
        return os.environ[oracle_variable(version)]
    done = subprocess.run(["bash", str(REPO / "scripts" / "skyrl_oracle_env.sh"), version], capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise RuntimeError(f"could not build the SkyRL {version} oracle env:\n{done.stdout[-3000:]}\n"
                           f"{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


def run_oracle(python: str, inputs: dict[int, dict[str, np.ndarray]], work: Path) -> dict[int, dict[str, np.ndarray]]:
    """SkyRL's outputs for each seed's inputs, from one driver process."""
    (work / "spec.json").write_text(json.dumps(SPEC))
    args = []
    for seed, arrays in inputs.items():
        np.savez(work / f"in{seed}.npz", **arrays)
        args += [str(work / f"in{seed}.npz"), str(work / f"out{seed}.npz")]
    done = subprocess.run(
        [python, str(DRIVER), str(work / "spec.json"), *args],
        capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": ""},
    )
    if done.returncode != 0:
        raise RuntimeError(f"SkyRL driver failed:\n{done.stdout[-3000:]}\n{done.stderr[-5000:]}")
    result = {}
    for seed in inputs:
        with np.load(work / f"out{seed}.npz") as theirs:
            result[seed] = {k: theirs[k] for k in theirs.files}
    return result


def max_abs_diffs(mine: dict[str, np.ndarray], skyrl: dict[str, np.ndarray]) -> dict[str, float]:
    """max |ours - SkyRL| per quantity (NaN where either side is NaN); the names must agree."""
    skyrl_keys = set(skyrl) - {"__skyrl_version__"}
    assert skyrl_keys == set(mine), f"names differ: {sorted(skyrl_keys ^ set(mine))}"
    return {k: float(np.max(np.abs(mine[k].astype(np.float64) - skyrl[k].astype(np.float64)))) for k in mine}


def is_loss(key: str) -> bool:
    """Whether ``key`` names a scalar loss (checked relatively too, ``LOSS_RTOL``)."""
    return key.startswith(("loss/", "kl_loss/", "value_loss")) or key.endswith("/loss")


def too_far(mine: dict[str, np.ndarray], skyrl: dict[str, np.ndarray]) -> dict[str, float]:
    """The quantities past the bar: ``TOLERANCE`` absolute for all, and ``LOSS_RTOL`` relative for the losses."""
    bad = {k: d for k, d in max_abs_diffs(mine, skyrl).items() if not d <= TOLERANCE}
    for k in filter(is_loss, mine):
        theirs = float(skyrl[k])
        rel = abs(float(mine[k]) - theirs) / max(abs(theirs), 1e-12)
        if not rel <= LOSS_RTOL:
            bad[f"{k} (relative)"] = rel
    return bad


def record(version: str = "0.3.0", seed: int = 0) -> None:
    """Write seed ``seed``'s inputs and SkyRL ``version``'s outputs to ``RECORDED[version]`` (by hand, when a pin
    moves or the cases change)."""
    import tempfile

    inputs = make_inputs(seed)
    with tempfile.TemporaryDirectory() as work:
        outputs = run_oracle(build_oracle(version), {seed: inputs}, Path(work))[seed]
    assert str(outputs["__skyrl_version__"]) == version, outputs["__skyrl_version__"]
    np.savez_compressed(RECORDED[version], **{f"in/{k}": v for k, v in inputs.items()},
                        **{f"out/{k}": v for k, v in outputs.items()})


if __name__ == "__main__" and sys.argv[1:2] == ["--record"]:
    for v in sys.argv[2:] or VERSIONS:
        record(v)
        print(f"wrote {RECORDED[v]}")
