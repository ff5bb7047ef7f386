"""Do skyrl-nb's trainer and TRL's GRPOTrainer stay the same function over a whole run? One skyrl-nb run, replayed.

``python -m bench vs_trl.one_batch`` compares the two updates for one batch from the warm start, where the ratio is 1 and
the optimizer has no state; this follows a whole run. A real skyrl-nb tiny run (``vs_trl.skyrl_config``, the
bench's settings, ``--seed``, from the warm start of ``--model-seed``) records every step's batch: the prompts,
the sampled tokens (EOS kept), the sampler's log-prob of each and the rewards. Then TRL's ``GRPOTrainer``, built as
``vs_trl.trl_side`` builds it (its own optimizer, clipping, schedule, advantages, loss and ``train()`` loop), trains
on the same batches in the same order: its dataset is the run's prompts in step order (``shuffle_dataset=False``)
and its sampler (``_generate_single_turn``) is replaced by the recorded tokens, after checking that TRL tokenised
each step's prompts to the recorded ids. Its reward function scores its own decoding of them.

At every step TRL's training forward gives each sampled token a log-prob under TRL's weights after the previous
steps; skyrl-nb's sampler gave it one under skyrl-nb's weights after the same steps. If the two trainers are the same
function, the two agree to rounding until rounding itself has grown. How fast rounding-sized differences grow in this
run is measured by the controls: TRL replayed again with its learning rate (only) times each of ``--controls``
(default 1.000001, a nudge of rounding size, and 1.01, a real 1 % difference), compared with TRL itself. Reported per
curve: the worst step, the first steps past 1e-3 and 1e-1, and each 100 steps' largest and mean gap; and skyrl-nb's
own sampler-to-trainer gap for scale. The replay stops with an error if TRL tokenises a prompt to other ids or scores a
step otherwise than skyrl-nb did.

``--grpo-epsilon`` sets skyrl-nb's group-std constant (SkyRL's 1e-6) to another value for the run, e.g. TRL's 1e-4.

    .venv/bin/python -m bench vs_trl.replay --model-seed 2 --seed 12 --out bench/results/vs_trl_replay.json
    .venv/bin/python -m bench vs_trl.replay --model-seed 2 --seed 12 --steps 400 --controls "" --grpo-epsilon 1e-4 --out bench/results/vs_trl_replay_eps1e-4.json
    .venv/bin/python -m bench vs_trl.replay --model-seed 2 --seed 30 --steps 400 --out bench/results/vs_trl_replay_seed30.json
"""

from __future__ import annotations

import argparse
import os
import sys

from bench.vs_trl import (  # noqa: E402
    SETUPS,
    model_dir_for,
    report,
    run_parts,
    skyrl_trainer,
    trl_config,
    trl_reward,
    trl_trainer,
)

SETUP = SETUPS["tiny"]


def skyrl_run(work: str, model_seed: int, seed: int, steps: int, grpo_epsilon: float | None = None) -> None:
    """A real skyrl-nb run (``RLTrainer``, in-process workers) that records each step's batch -> ``<work>/run.pt``.
    ``grpo_epsilon``: the constant added to a group's reward std, in place of skyrl-nb's (SkyRL's) 1e-6."""
    import torch

    from skyrl_core.runs import RunReader
    from skyrl_engine import algorithms

    if grpo_epsilon is not None:
        algorithms.advantages.GRPO_EPSILON = grpo_epsilon
    trainer, model_dir = skyrl_trainer(SETUP, steps, 1, seed, os.path.join(work, "skyrl"), model_dir_for(SETUP, model_seed))
    n = SETUP["group"]
    steps_seen: list[dict] = []
    generate_step = trainer.generate_step

    def recording(step: int):
        out = generate_step(step)
        s = out.samples
        rows = trainer.loader.batch(step)
        lengths = s.response_mask_BT.sum(-1).tolist()
        steps_seen.append({
            "step": step,
            "prompts": [r.prompt for r in rows], "ground_truth": [str(r.ground_truth) for r in rows],
            "prompt_ids": [s.prompt_ids_BP[g * n][s.prompt_mask_BP[g * n].bool()].tolist() for g in range(len(rows))],
            "completion_ids": [s.response_ids_BT[b, :k].tolist() for b, k in enumerate(lengths)],
            "logprobs": [s.logprobs_BT[b, :k].tolist() for b, k in enumerate(lengths)],
            "rewards": [float(r) for r in out.rewards_B],
        })
        return out

    trainer.generate_step = recording
    trainer.train()
    metrics = RunReader(trainer.cfg.run_dir).metrics()
    torch.save({"model_dir": model_dir, "steps": steps_seen,
                "self_gap_max": [m["policy/rollout_train_logprobs_abs_diff_max"] for m in metrics],
                "reward": [m["reward/avg_raw_reward"] for m in metrics]}, os.path.join(work, "run.pt"))


def trl_replay(run: dict, work: str, seed: int, lr_scale: float) -> list[list[list[float]]]:
    """TRL's trainer (learning rate times ``lr_scale``) on the recorded batches of ``run`` (:func:`skyrl_run`'s),
    in order; returns, per step and per recorded sample, TRL's log-probs of its tokens before that step's update (run
    with the TRL env's python)."""
    import torch
    from datasets import Dataset

    torch.set_num_threads(1)
    recorded = run["steps"]
    n = SETUP["group"]
    args = trl_config(SETUP, len(recorded), seed, os.path.join(work, f"trl_out_{lr_scale}"))
    args.shuffle_dataset = False
    args.learning_rate = SETUP["lr"] * lr_scale
    rule = trl_reward(SETUP)
    rewards: list[list[float]] = []

    def reward(completions, ground_truth, **kwargs):
        scores = rule(completions, ground_truth, **kwargs)
        rewards.append(scores)
        return scores

    trainer = trl_trainer(SETUP, run["model_dir"], args, reward)
    trainer.train_dataset = Dataset.from_list([{"prompt": p, "ground_truth": g} for r in recorded
                                               for p, g in zip(r["prompts"], r["ground_truth"], strict=True)])
    calls = {"generate": 0}

    def recorded_completions(prompt_ids, *_args, **_kwargs):  # TRL's sampler, replaced by the run's tokens
        r = recorded[calls["generate"]]
        calls["generate"] += 1
        want = [list(r["prompt_ids"][b // n]) for b in range(len(r["completion_ids"]))]
        if [list(map(int, p)) for p in prompt_ids] != want:
            raise SystemExit(f"step {r['step']}: TRL tokenised the prompts to other ids than skyrl-nb's")
        return [list(c) for c in r["completion_ids"]], None

    logprobs: list[list[list[float]]] = []
    logps_fn = trainer._get_per_token_logps_and_entropies

    def logps_then_keep(model, input_ids, attention_mask, logits_to_keep, *a, **kw):
        result = logps_fn(model, input_ids, attention_mask, logits_to_keep, *a, **kw)
        if torch.is_grad_enabled():  # the loss's forward: this step's weights, before its update
            # TRL shuffles a generation batch's rows before the loss, so each row is matched to its sample by its
            # tokens (samples with the same tokens get the same log-probs)
            r = recorded[calls["generate"] - 1]
            T, logps_BT = logits_to_keep, result[0].detach()
            by_tokens = {}
            for b in range(input_ids.shape[0]):
                prompt = input_ids[b, :-T][attention_mask[b, :-T].bool()].tolist()
                completion = input_ids[b, -T:][attention_mask[b, -T:].bool()].tolist()
                by_tokens[(tuple(prompt), tuple(completion))] = logps_BT[b, :len(completion)].tolist()
            logprobs.append([by_tokens[(tuple(r["prompt_ids"][b // n]), tuple(c))]
                             for b, c in enumerate(r["completion_ids"])])
        return result

    trainer._generate_single_turn = recorded_completions
    trainer._get_per_token_logps_and_entropies = logps_then_keep
    trainer.train()
    if len(logprobs) != len(recorded) or calls["generate"] != len(recorded):
        raise SystemExit(f"TRL trained {len(logprobs)} steps and sampled {calls['generate']} of {len(recorded)}")
    differ = [r["step"] for r, got in zip(recorded, rewards, strict=True) if r["rewards"] != list(got)]
    if differ:
        raise SystemExit(f"TRL's rewards differ from skyrl-nb's at steps {differ[:10]}")
    return logprobs


def trl_replays(work: str, seed: int, lr_scales: list[float]) -> None:
    """:func:`trl_replay` at each learning-rate scale -> ``<work>/trl.pt``."""
    import torch

    run = torch.load(os.path.join(work, "run.pt"), weights_only=False)
    torch.save({scale: trl_replay(run, work, seed, scale) for scale in lr_scales}, os.path.join(work, "trl.pt"))


def gaps(a: list[list[list[float]]], b: list[list[list[float]]]) -> list[tuple[float, float]]:
    """Per step: the largest and the mean absolute difference of two runs' log-probs of the same tokens."""
    out = []
    for step_a, step_b in zip(a, b, strict=True):
        diffs = [abs(x - y) for sa, sb in zip(step_a, step_b, strict=True) for x, y in zip(sa, sb, strict=True)]
        out.append((max(diffs), sum(diffs) / len(diffs)))
    return out


def summary(per_step: list[tuple[float, float]]) -> dict:
    """A gap curve in a few numbers: the worst step, the first step past 1e-3 and 1e-1, and each 100 steps."""
    def first_over(limit: float) -> int | None:
        return next((i + 1 for i, (m, _) in enumerate(per_step) if m > limit), None)

    worst = max(range(len(per_step)), key=lambda i: per_step[i][0])
    return {
        "max": float(f"{per_step[worst][0]:.3g}"), "max_step": worst + 1,
        "first_step_over_1e-3": first_over(1e-3), "first_step_over_1e-1": first_over(1e-1),
        "by_100_steps": {f"{lo + 1}-{lo + len(per_step[lo:lo + 100])}": {
            "max": float(f"{max(m for m, _ in per_step[lo:lo + 100]):.3g}"),
            "mean": float(f"{sum(mean for _, mean in per_step[lo:lo + 100]) / len(per_step[lo:lo + 100]):.3g}")}
            for lo in range(0, len(per_step), 100)},
    }


def compare(work: str, lr_scales: list[float]) -> dict:
    import torch

    run = torch.load(os.path.join(work, "run.pt"), weights_only=False)
    trl = torch.load(os.path.join(work, "trl.pt"), weights_only=False)
    sampler = [r["logprobs"] for r in run["steps"]]
    base = trl[1.0]
    curves = {"trl_vs_skyrl_sampler": gaps(base, sampler),
              **{f"trl_lr_x{scale}_vs_trl": gaps(trl[scale], base) for scale in lr_scales if scale != 1.0}}
    rewards = run["reward"]
    result = {
        "steps": len(sampler), "rewards_identical_every_step": True,  # trl_replay stops with an error otherwise
        "skyrl_reward_first_10_last_10": [round(sum(rewards[:10]) / len(rewards[:10]), 4),
                                          round(sum(rewards[-10:]) / len(rewards[-10:]), 4)],
        "skyrl_sampler_vs_own_trainer_gap_max": max(run["self_gap_max"]),
        "trl_vs_skyrl_sampler": summary(curves["trl_vs_skyrl_sampler"]),
        "controls": {name: summary(curve) for name, curve in curves.items() if name != "trl_vs_skyrl_sampler"},
        "gap_max_per_step": {name: [float(f"{m:.3g}") for m, _ in curve] for name, curve in curves.items()},
    }
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-seed", type=int, default=2, help="the tiny model's warm start")
    parser.add_argument("--seed", type=int, default=12, help="the skyrl-nb run's trainer.seed")
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--controls", default="1.000001,1.01",
                        help="comma-separated learning-rate scales; TRL is replayed at each too and compared with itself")
    parser.add_argument("--grpo-epsilon", type=float, default=None,
                        help="skyrl-nb's group-std constant (default its own, SkyRL's 1e-6; TRL's is 1e-4)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--part", choices=["skyrl", "trl"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    lr_scales = [1.0, *(float(x) for x in args.controls.split(",") if x)]
    if args.part == "skyrl":
        skyrl_run(args.workdir, args.model_seed, args.seed, args.steps, args.grpo_epsilon)
        return 0
    if args.part == "trl":
        trl_replays(args.workdir, args.seed, lr_scales)
        return 0
    work = run_parts("bench.vs_trl.replay", ["skyrl", "trl"], ["--model-seed", str(args.model_seed), "--seed", str(args.seed),
                     "--steps", str(args.steps), "--controls", args.controls,
                     *(["--grpo-epsilon", str(args.grpo_epsilon)] if args.grpo_epsilon is not None else [])])
    result = {"bench": "vs_trl_replay", "model_seed": args.model_seed, "seed": args.seed,
              "skyrl_grpo_epsilon": args.grpo_epsilon, **compare(work, lr_scales)}
    report(result, args.out, {k: v for k, v in result.items() if k != "gap_max_per_step"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
