"""Runs SkyRL's own algorithm code on saved inputs; executed by the ORACLE env's python, not ours.

    <oracle python> skyrl_oracle_driver.py spec.json inputs1.npz outputs1.npz [inputs2.npz outputs2.npz ...]

Used by test_parity_skyrl.py. Every output is computed by SkyRL functions; the output names are
the contract with that test. Nothing here imports skyrl_engine.
"""

import ast
import json
import sys
import types
from importlib import metadata
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch


def import_skyrl():
    """Import SkyRL's ppo_utils (0.3.0 on Python 3.11, 0.4.0 on 3.12; see ../shared/MACHINE-NOTES.md).

    On 3.11 ``skyrl/backends/__init__.py`` imports ``skyrl.tinker.types``, which pydantic rejects there;
    a stand-in package object with the real ``__path__`` lets submodules import without it. 3.12 needs none.
    """
    import skyrl

    if sys.version_info < (3, 12):
        stand_in = types.ModuleType("skyrl.backends")
        stand_in.__path__ = [str(Path(skyrl.__path__[0]) / "backends")]
        sys.modules["skyrl.backends"] = stand_in
    from skyrl.backends.skyrl_train.utils import ppo_utils, torch_utils
    from skyrl.train import config as skyrl_config

    return skyrl, ppo_utils, torch_utils, skyrl_config


def load_trainer_method(skyrl, ppo_utils, name):
    """SkyRL's ``RayPPOTrainer.<name>`` compiled from trainer.py's source.

    ``skyrl.train.trainer`` cannot be imported without GPU-side packages (torchdata, vllm), so the
    one method is taken from its source and run against ppo_utils' real functions.
    """
    path = Path(skyrl.__path__[0]) / "train" / "trainer.py"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            module = ast.Module(body=[node], type_ignores=[])
            namespace = {
                "torch": torch,
                "Float": ppo_utils.Float,
                "TrainingInputBatch": object,
                "compute_approx_kl": ppo_utils.compute_approx_kl,
                "masked_mean": ppo_utils.masked_mean,
            }
            exec(compile(module, str(path), "exec"), namespace)
            return namespace[name]
    raise RuntimeError(f"{name} not found in {path}")


class Batch(dict):
    """Stand-in for TrainingInputBatch: a dict of tensors with a ``metadata`` dict."""

    def __init__(self, **tensors):
        super().__init__(**tensors)
        self.metadata = {}


def skyrl_version():
    return metadata.version("skyrl")


def at_least_040():
    return tuple(int(x) for x in skyrl_version().split(".")[:2]) >= (0, 4)


def main(spec_path, *paths):
    modules = import_skyrl()
    spec = json.loads(Path(spec_path).read_text())
    for inputs_path, outputs_path in zip(paths[::2], paths[1::2], strict=True):
        run_one(modules, spec, inputs_path, outputs_path)


def run_one(modules, spec, inputs_path, outputs_path):
    skyrl, ppo, torch_utils, skyrl_config = modules
    data = np.load(inputs_path)
    t = {k: torch.from_numpy(data[k]) for k in data.files if k != "index"}
    index = data["index"]
    mask = t["mask"]
    batch, width = mask.shape
    out = {}

    def algo(cispo_anchor=None, dppo_type="binary_tv", **kw):
        anchor = {} if cispo_anchor is None else {"cispo_anchor": cispo_anchor}  # 0.4.0's key
        base = dict(
            eps_clip_low=spec["eps_clip_low"],
            eps_clip_high=spec["eps_clip_high"],
            clip_ratio_c=spec["clip_ratio_c"],
            value_clip=spec["value_clip"],
            kl_loss_coef=spec["kl_loss_coef"],
            cispo=skyrl_config.CISPOConfig(
                cispo_eps_clip_low=spec["cispo_eps_clip_low"], cispo_eps_clip_high=spec["cispo_eps_clip_high"], **anchor
            ),
            sapo=skyrl_config.SAPOConfig(tau_pos=spec["sapo_tau_pos"], tau_neg=spec["sapo_tau_neg"]),
            clip_cov=skyrl_config.ClipCovConfig(
                clip_ratio=spec["clip_cov_ratio"], clip_cov_lb=spec["clip_cov_lb"], clip_cov_ub=spec["clip_cov_ub"]
            ),
            kl_cov=skyrl_config.KLCovConfig(kl_cov_frac=spec["kl_cov_frac"], ppo_kl_coef=spec["ppo_kl_coef"]),
            dppo=skyrl_config.DPPOConfig(
                dppo_type=dppo_type, delta_low=spec["dppo_delta_low"], delta_high=spec["dppo_delta_high"]
            ),
        )
        base.update(kw)
        return skyrl_config.AlgorithmConfig(**base)

    # advantage estimators: SkyRL's registered functions, called by registry name
    est = ppo.AdvantageEstimatorRegistry.get
    for norm in (True, False):
        adv, ret = est("grpo")(
            token_level_rewards=t["rewards"].clone(), response_mask=mask, index=index, grpo_norm_by_std=norm
        )
        out[f"adv/grpo/norm={norm}"], out[f"ret/grpo/norm={norm}"] = adv, ret
    out["adv/rloo"], out["ret/rloo"] = est("rloo")(
        token_level_rewards=t["rewards"].clone(), response_mask=mask, index=index
    )
    out["adv/reinforce++"], out["ret/reinforce++"] = est("reinforce++")(
        token_level_rewards=t["rewards"].clone(), response_mask=mask, gamma=spec["gamma"]
    )
    out["adv/maxrl"], out["ret/maxrl"] = est("maxrl")(
        token_level_rewards=t["rewards"].clone(), response_mask=mask, index=index
    )
    out["adv/maxrl/binary"], out["ret/maxrl/binary"] = est("maxrl")(
        token_level_rewards=t["binary_rewards"].clone(), response_mask=mask, index=index
    )
    out["adv/gae"], out["ret/gae"] = est("gae")(
        token_level_rewards=t["rewards"].clone(),
        values=t["values"],
        response_mask=mask,
        gamma=spec["gamma"],
        lambd=spec["lambd"],
    )

    # policy losses: SkyRL's loss is a masked SUM of the per-token loss computed on advantages
    # that apply_loss_reduction_to_advantages_minibatch rescaled beforehand (whole batch = one
    # mini-batch). The gradient w.r.t. log_probs is recorded too.
    for loss_name in ("regular", "dual_clip", "gspo", "cispo"):
        for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
            config = algo(policy_loss_type=loss_name, loss_reduction=reduction, max_seq_len=spec["max_seq_len"])
            scaled = ppo.apply_loss_reduction_to_advantages_minibatch(
                t["advantages"], mask, reduction, micro_batch_size=batch, max_seq_len=spec["max_seq_len"]
            )
            log_probs = t["log_probs"].clone().requires_grad_(True)
            loss, metrics = ppo.PolicyLossRegistry.get(loss_name)(
                log_probs, t["old_log_probs"], scaled, config, loss_mask=mask
            )
            loss.backward()
            key = f"{loss_name}/{reduction}"
            out[f"loss/{key}"] = loss.detach()
            out[f"clip_ratio/{key}"] = torch.tensor(metrics["clip_ratio"])
            out[f"grad/{key}"] = log_probs.grad

    # off-policy correction: SkyRL's regular loss with off_policy_correction and the sampler's log-probs
    for case, correction in spec["off_policy_cases"].items():
        for reduction in ("token_mean", "sequence_mean"):
            config = algo(
                policy_loss_type="regular",
                loss_reduction=reduction,
                off_policy_correction=skyrl_config.OffPolicyCorrectionConfig(**correction),
            )
            scaled = ppo.apply_loss_reduction_to_advantages_minibatch(
                t["advantages"], mask, reduction, micro_batch_size=batch, max_seq_len=spec["max_seq_len"]
            )
            log_probs = t["log_probs"].clone().requires_grad_(True)
            loss, metrics = ppo.PolicyLossRegistry.get("regular")(
                log_probs, t["old_log_probs"], scaled, config, loss_mask=mask, rollout_logprobs=t["rollout_log_probs"]
            )
            loss.backward()
            key = f"off_policy/{case}/{reduction}"
            out[f"{key}/loss"], out[f"{key}/grad"] = loss.detach(), log_probs.grad
            for name, value in metrics.items():
                out[f"{key}/{name}"] = torch.tensor(value)

    # the losses beside the PPO family, each case with the sampler's log-probs and every metric by name; the
    # reduction as above (advantages rescaled first). clip_cov draws at random: the generator seeded before each.
    cases = dict(spec["more_loss_cases"], **(spec["more_loss_cases_0.4"] if at_least_040() else {}))
    for case, c in cases.items():
        for reduction in ("token_mean", "sequence_mean", "seq_mean_token_sum_norm"):
            extra = {k: c[k] for k in ("cispo_anchor", "dppo_type") if k in c}
            if "off_policy" in c:
                extra["off_policy_correction"] = skyrl_config.OffPolicyCorrectionConfig(**c["off_policy"])
            config = algo(policy_loss_type=c["loss"], loss_reduction=reduction, max_seq_len=spec["max_seq_len"],
                          **extra)
            scaled = ppo.apply_loss_reduction_to_advantages_minibatch(
                t["advantages"], mask, reduction, micro_batch_size=batch, max_seq_len=spec["max_seq_len"]
            )
            log_probs = t["log_probs"].clone().requires_grad_(True)
            torch.manual_seed(spec["clip_cov_seed"])
            loss, metrics = ppo.PolicyLossRegistry.get(c["loss"])(
                log_probs, t["old_log_probs"], scaled, config, loss_mask=mask,
                rollout_logprobs=t["rollout_log_probs"] if c.get("rollout", True) else None,
            )
            loss.backward()
            key = f"more_loss/{case}/{reduction}"
            out[f"{key}/loss"], out[f"{key}/grad"] = loss.detach(), log_probs.grad
            for name, value in metrics.items():
                out[f"{key}/{name}"] = torch.tensor(value)

    # KL estimators, masked, and the KL loss as SkyRL's worker adds it
    # (worker.py: masked_mean(kl, loss_mask, dim=-1).mean())
    for kind in ("k1", "k2", "k3", "abs"):
        kl = ppo.compute_approx_kl(t["log_probs"], t["ref_log_probs"], loss_mask=mask, kl_estimator_type=kind)
        out[f"kl/{kind}"] = kl
        out[f"kl_loss/{kind}"] = ppo.masked_mean(kl, mask, dim=-1).mean()
        out[f"kl_unmasked/{kind}"] = ppo.compute_approx_kl(t["log_probs"], t["ref_log_probs"], kl_estimator_type=kind)

    out["whiten"] = ppo.masked_whiten(t["values"], mask)
    out["masked_mean"] = ppo.masked_mean(t["values"], mask)
    out["masked_mean_rows"] = ppo.masked_mean(t["values"], mask, dim=-1)

    value_loss, clipfrac = ppo.ppo_critic_loss(t["values"], t["old_values"], t["returns"], algo(), loss_mask=mask)
    out["value_loss"], out["value_clipfrac"] = value_loss, torch.tensor(clipfrac)
    value_loss, _ = ppo.ppo_critic_loss(t["values"], t["old_values"], t["returns"], algo(value_clip=None), mask)
    out["value_loss/no_clip"] = value_loss

    out["entropy"] = torch_utils.chunked_entropy_from_logits(t["logits"], requires_grad=False)

    # KL in the reward: the trainer's method, with each controller, over three steps
    apply_penalty = load_trainer_method(skyrl, ppo, "apply_reward_kl_penalty")
    for ctrl_type in ("fixed", "adaptive"):
        config = algo(
            use_kl_loss=False,
            use_kl_in_reward=True,
            kl_estimator_type="k3",
            kl_ctrl=skyrl_config.KLCtrlConfig(type=ctrl_type, kl_target=spec["kl_target"], horizon=spec["kl_horizon"]),
        )
        trainer = SimpleNamespace(
            cfg=SimpleNamespace(trainer=SimpleNamespace(algorithm=config)),
            reward_kl_controller=ppo.get_kl_controller(config),
            all_metrics={},
        )
        rewards = t["rewards"].clone()
        for step in range(3):
            shift = 0.5 * step  # a different KL each step so the adaptive coefficient moves
            result = apply_penalty(
                trainer,
                Batch(
                    loss_mask=mask,
                    rewards=rewards,
                    base_action_log_probs=t["ref_log_probs"],
                    action_log_probs=t["log_probs"] + shift,
                ),
            )
            rewards = result["rewards"]
            for name, value in result.metadata["metrics"].items():
                out[f"kl_reward/{ctrl_type}/{step}/{name}"] = torch.tensor(value)
        out[f"kl_reward/{ctrl_type}/rewards"] = rewards
        out[f"kl_reward/{ctrl_type}/final_coef"] = torch.tensor(trainer.reward_kl_controller.value)

    arrays = {k: v.detach().numpy() for k, v in out.items()}
    arrays["__skyrl_version__"] = np.array(skyrl_version())
    np.savez(outputs_path, **arrays)


if __name__ == "__main__":
    main(*sys.argv[1:])
