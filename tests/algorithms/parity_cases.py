"""Shared by the SkyRL parity tests: the random cases, our side of the computation, the oracle run.

    .venv/bin/python tests/algorithms/parity_cases.py --record

re-records ``skyrl_0.3.0_outputs.npz`` (inputs and SkyRL's outputs for seed 0) with the oracle env,
which the fast test_parity_skyrl_recorded.py compares against without installing SkyRL.
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
RECORDED = HERE / "skyrl_0.3.0_outputs.npz"
TOLERANCE = 1e-6
SPEC = dict(
    eps_clip_low=0.2, eps_clip_high=0.28, clip_ratio_c=3.0, value_clip=0.2, kl_loss_coef=0.05,
    cispo_eps_clip_low=0.1, cispo_eps_clip_high=0.15, gamma=0.95, lambd=0.9, max_seq_len=24,
    kl_target=0.1, kl_horizon=50,
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
    """Random float32 batch: 14 samples in groups of 4, 4, 3, 2, 1; right-padded lengths 2..16."""
    rng = np.random.default_rng(seed)
    index = np.array(["p0"] * 4 + ["p1"] * 4 + ["p2"] * 3 + ["p3"] * 2 + ["p4"])
    batch, width = len(index), 16
    lengths = rng.integers(2, width + 1, size=batch)
    mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.float32)

    def f32(x):
        return np.asarray(x, dtype=np.float32)

    old = f32(-rng.uniform(0.05, 3.0, (batch, width)))
    return dict(
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


def ours(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The driver's outputs, computed with skyrl_engine.algorithms."""
    t = {k: torch.from_numpy(v) for k, v in inputs.items() if k != "index"}
    index, mask = inputs["index"], t["mask"]
    s = SimpleNamespace(**SPEC)
    out: dict[str, torch.Tensor] = {}

    def algo(**kw):
        base = dict(SPEC, cispo=SimpleNamespace(cispo_eps_clip_low=s.cispo_eps_clip_low,
                                                cispo_eps_clip_high=s.cispo_eps_clip_high))
        base.update(kw)
        return SimpleNamespace(**base)

    for norm in (True, False):
        adv, ret = alg.compute_advantages("grpo", t["rewards"], mask, index, algo(grpo_norm_by_std=norm))
        out[f"adv/grpo/norm={norm}"], out[f"ret/grpo/norm={norm}"] = adv, ret
    for name in ("rloo", "reinforce++", "gae"):
        out[f"adv/{name}"], out[f"ret/{name}"] = alg.compute_advantages(
            name, t["rewards"], mask, index, algo(), values=t["values"])

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


def build_oracle() -> str:
    """Path of the SkyRL oracle env's python, building the env first if needed (raises on failure)."""
    if os.environ.get("SKYRL_ORACLE_PYTHON"):
        return os.environ["SKYRL_ORACLE_PYTHON"]
    done = subprocess.run(["bash", str(REPO / "scripts" / "skyrl_oracle_env.sh")], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"could not build the SkyRL oracle env:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
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


def record(path: Path = RECORDED, seed: int = 0) -> None:
    """Write seed ``seed``'s inputs and SkyRL's outputs to ``path`` (run by hand when SkyRL's pin moves)."""
    import tempfile

    inputs = make_inputs(seed)
    with tempfile.TemporaryDirectory() as work:
        outputs = run_oracle(build_oracle(), {seed: inputs}, Path(work))[seed]
    np.savez_compressed(path, **{f"in/{k}": v for k, v in inputs.items()}, **{f"out/{k}": v for k, v in outputs.items()})


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    record()
    print(f"wrote {RECORDED}")
