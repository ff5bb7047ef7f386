"""Do skyrl-nb and TRL's GRPOTrainer compute the same update for the same batch? One batch, both losses, gradients compared.

``python -m bench vs_trl`` runs the two loops side by side; this checks the step itself. One batch of the tiny setup
(16 prompts × 8 samples, ≤ 8 new tokens, temperature 1) is sampled once with skyrl-nb's sampler from the
warm start of ``--model-seed`` and scored with the arithmetic reward. Then:

- skyrl-nb: ``build_train_batch`` and a real ``PolicyWorker.train_step`` (the bench's settings); the gradients
  are copied inside ``clip_grad_norm``, before clipping;
- TRL: ``GRPOTrainer`` built as ``vs_trl.trl_side`` builds it, with only its sampler
  (``_generate_single_turn``) replaced by the saved completions, so its own tokenisation, reward call,
  advantages and masks run (``_generate_and_score_completions``), then its ``compute_loss`` and a backward.

Reported: whether the prompt token ids agree, TRL's forward log-probs of the sampled tokens against the sampler's,
the advantages, the losses, the pre-clip gradient norms, and the
cosine and relative difference of the whole gradient and of its worst tensors. ``--noise S`` samples from a copy
of the model with N(0, S) added to its weights (so the sampler's log-probs are not the trained model's; longer, truncated and padded completions; with fewer than four
groups of mixed reward, samples 0 and 3 of the first eight groups are given reward 1, through both reward paths).

    .venv/bin/python -m bench vs_trl.one_batch --model-seed 2 --out bench/results/vs_trl_one_batch.json
    .venv/bin/python -m bench vs_trl.one_batch --model-seed 2 --noise 0.1 --out bench/results/vs_trl_one_batch_noisy.json
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.vs_trl import (  # noqa: E402
    SETUPS,
    add_noise,
    model_dir_for,
    report,
    reward_rule,
    run_parts,
    skyrl_config,
    trl_config,
    trl_reward,
    trl_trainer,
)

SETUP = SETUPS["tiny"]


def sample(work: str, model_seed: int, sample_seed: int, noise: float) -> None:
    """The batch: prompts, completions (EOS kept), the sampler's log-probs, rewards -> ``<work>/batch.pt``."""
    import torch

    from skyrl_core.config import SamplingParams
    from skyrl_engine.models import encode_prompt, load_model, load_tokenizer
    from skyrl_engine.sampler import TorchSampler
    from skyrl_engine.tasks import load_prompts

    torch.set_num_threads(1)
    model_dir = model_dir_for(SETUP, model_seed)
    rows = load_prompts([SETUP["data"]])
    tok = load_tokenizer(model_dir)
    model = load_model(model_dir)
    if noise:  # the sampler's copy only: a policy whose samples are longer and more varied
        add_noise(model, noise)
    n = SETUP["group"]
    order = torch.randperm(len(rows), generator=torch.Generator().manual_seed(sample_seed))[: SETUP["prompts"]].tolist()
    picked = [rows[i] for i in order]
    prompt_ids = [encode_prompt(tok, r.prompt) for r in picked]
    params = SamplingParams(max_generate_length=SETUP["max_new"], temperature=SETUP["temperature"])
    comp = TorchSampler(model, pad_id=tok.pad_token_id).generate(prompt_ids, n, params, seed=sample_seed,
                                                                  stop_token_ids=[tok.eos_token_id])
    texts = [tok.decode(ids, skip_special_tokens=True) for ids in comp.response_ids]
    score = reward_rule(SETUP)
    rewards = [score(t, str(picked[b // n].ground_truth)) for b, t in enumerate(texts)]
    mixed = sum(1 for g in range(len(picked)) if 0 < sum(rewards[g * n:(g + 1) * n]) < n)
    set_by_hand = mixed < 4
    if set_by_hand:  # a gradient check needs groups whose advantages are not all zero
        rewards = [1.0 if b < 8 * n and b % n in (0, 3) else r for b, r in enumerate(rewards)]
    torch.save({"model_dir": model_dir, "prompts": [r.prompt for r in picked],
                "ground_truth": [str(r.ground_truth) for r in picked], "prompt_ids": prompt_ids,
                "completion_ids": comp.response_ids, "rollout_logprobs": comp.logprobs,
                "finish_reasons": comp.finish_reasons, "texts": texts, "rewards": rewards,
                "rewards_set_by_hand": set_by_hand, "noise": noise, "group": n}, os.path.join(work, "batch.pt"))


def skyrl_grad(work: str, model_seed: int) -> None:
    """skyrl-nb's advantages, loss and pre-clip gradients for the batch -> ``<work>/skyrl.pt``."""
    import torch

    from skyrl_engine.models import load_tokenizer
    from skyrl_engine.policy import PolicyWorker
    from skyrl_engine.protocol import to_sample_batch
    from skyrl_engine.trainer import build_train_batch
    from skyrl_engine.types import Completions, GeneratorOutput

    d = torch.load(os.path.join(work, "batch.pt"), weights_only=False)
    n, B = d["group"], len(d["completion_ids"])
    cfg = skyrl_config(SETUP, 1, 1, model_seed, work, d["model_dir"])
    tok = load_tokenizer(d["model_dir"])
    comp = Completions(prompt_index=[b // n for b in range(B)], response_ids=d["completion_ids"],
                       logprobs=d["rollout_logprobs"], finish_reasons=d["finish_reasons"], policy_version=0, generate_s=0.0)
    out = GeneratorOutput(samples=to_sample_batch(comp, d["prompt_ids"], tok.pad_token_id), rewards_B=list(d["rewards"]),
                          responses=d["texts"], prompts=[""] * B, group_ids_B=[b // n for b in range(B)],
                          env_classes=["arithmetic"] * B, data_sources=[""] * B, env_metrics=[{}] * B, group_size=n)
    batch, advantages_BT = build_train_batch(out, cfg.trainer.algorithm)
    worker = PolicyWorker(d["model_dir"], cfg.trainer, cfg.generator.sampling_params.temperature, 1, 1, [])
    grads: dict = {}
    clip = worker.clip_grad_norm

    def copy_then_clip(max_norm: float):
        grads.update({k: p.grad.detach().clone() for k, p in worker.model.named_parameters() if p.grad is not None})
        return clip(max_norm)

    worker.clip_grad_norm = copy_then_clip
    metrics = worker.train_step(batch)
    torch.save({"grads": grads, "advantages_B": advantages_BT[:, 0], "loss": metrics["policy/policy_loss"],
                "mask_BT": batch.response_mask_BT}, os.path.join(work, "skyrl.pt"))


def trl_grad(work: str, model_seed: int) -> None:
    """TRL's advantages, loss and gradients for the batch -> ``<work>/trl.pt`` (run with the TRL env's python)."""
    import torch

    torch.set_num_threads(1)
    d = torch.load(os.path.join(work, "batch.pt"), weights_only=False)
    n, saved = d["group"], [list(c) for c in d["completion_ids"]]
    rule = trl_reward(SETUP)

    def reward(completions, ground_truth, **_):
        if d["rewards_set_by_hand"]:
            return [float(r) for r in d["rewards"]]
        return rule(completions, ground_truth)

    trainer = trl_trainer(SETUP, d["model_dir"], trl_config(SETUP, 1, model_seed, os.path.join(work, "trl_out")), reward)
    trl_prompt_ids = [list(map(int, p)) for p in trainer._tokenize_prompts(d["prompts"])[0]]

    def saved_completions(prompt_ids, *_args, **_kwargs):  # TRL's sampler, replaced by the batch's completions
        return [list(c) for c in saved], None

    trainer._generate_single_turn = saved_completions
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    out = trainer._generate_and_score_completions(
        [{"prompt": d["prompts"][b // n], "ground_truth": d["ground_truth"][b // n]} for b in range(len(saved))])
    with torch.no_grad():  # TRL's forward log-probs of the saved tokens, against the sampler's
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], 1)
        logps_BT = trainer._get_per_token_logps_and_entropies(
            trainer.model, ids, torch.cat([out["prompt_mask"], out["completion_mask"]], 1), out["completion_ids"].size(1))[0]
    rollout_BT = torch.zeros_like(logps_BT)
    for b, lp in enumerate(d["rollout_logprobs"]):
        rollout_BT[b, :len(lp)] = torch.tensor(lp)
    logp_gap = float(((logps_BT - rollout_BT).abs() * out["completion_mask"]).max())
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, out)
    loss.backward()
    torch.save({"grads": {k: p.grad.detach().clone() for k, p in trainer.model.named_parameters() if p.grad is not None},
                "advantages_B": out["advantages"].detach().clone(), "loss": float(loss.detach()), "prompt_ids": trl_prompt_ids,
                "mask_BT": out["completion_mask"], "logp_gap": logp_gap}, os.path.join(work, "trl.pt"))


def compare(work: str) -> dict:
    """The two sides' numbers side by side."""
    import torch

    d = torch.load(os.path.join(work, "batch.pt"), weights_only=False)
    s = torch.load(os.path.join(work, "skyrl.pt"), weights_only=False)
    t = torch.load(os.path.join(work, "trl.pt"), weights_only=False)
    gs, gt = s["grads"], t["grads"]
    keys = sorted(set(gs) & set(gt))
    fs = torch.cat([gs[k].double().flatten() for k in keys])
    ft = torch.cat([gt[k].double().flatten() for k in keys])
    per_tensor = sorted(((float((gs[k].double() - gt[k].double()).norm() / gt[k].double().norm().clamp(min=1e-30)), k)
                         for k in keys), reverse=True)
    a_s, a_t = s["advantages_B"].double(), t["advantages_B"].double()
    n = d["group"]
    return {
        "prompt_ids_identical": [list(p) for p in d["prompt_ids"]] == t["prompt_ids"],
        "samples": len(d["completion_ids"]), "tokens": int(s["mask_BT"].sum()),
        "masks_identical": torch.equal(s["mask_BT"].long(), t["mask_BT"].long()),
        "stopped_at_eos": d["finish_reasons"].count("stop"), "rewards_set_by_hand": d["rewards_set_by_hand"],
        "mixed_groups": sum(1 for g in range(len(d["prompts"])) if 0 < sum(d["rewards"][g * n:(g + 1) * n]) < n),
        "advantages_max_abs_diff": float((a_s - a_t).abs().max()),
        "trl_forward_vs_sampler_logprob_max_abs_diff": t["logp_gap"],
        "loss": {"skyrl_nb": s["loss"], "trl": t["loss"]},
        "grad_norm_before_clip": {"skyrl_nb": float(fs.norm()), "trl": float(ft.norm())},
        "same_parameters": sorted(gs) == sorted(gt),
        "grad_cosine": float(fs @ ft / (fs.norm() * ft.norm())),
        "grad_rel_diff": float((fs - ft).norm() / ft.norm()),
        "worst_tensors_rel_diff": {k: round(v, 8) for v, k in per_tensor[:5]},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-seed", type=int, default=2, help="the tiny model's warm start")
    parser.add_argument("--sample-seed", type=int, default=0)
    parser.add_argument("--noise", type=float, default=0.0)
    parser.add_argument("--out", default=None)
    parser.add_argument("--part", choices=["sample", "skyrl", "trl"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part == "sample":
        sample(args.workdir, args.model_seed, args.sample_seed, args.noise)
        return 0
    if args.part == "skyrl":
        skyrl_grad(args.workdir, args.model_seed)
        return 0
    if args.part == "trl":
        trl_grad(args.workdir, args.model_seed)
        return 0
    work = run_parts("bench.vs_trl.one_batch", ["sample", "skyrl", "trl"], ["--model-seed", str(args.model_seed),
                     "--sample-seed", str(args.sample_seed), "--noise", str(args.noise)])
    report({"bench": "vs_trl_one_batch", "model_seed": args.model_seed, "sample_seed": args.sample_seed,
            "noise": args.noise, **compare(work)}, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
