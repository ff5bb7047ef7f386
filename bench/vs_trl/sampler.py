"""Do skyrl-nb and TRL's GRPOTrainer sample from the same distribution? Many batches, no training, rewards compared.

``python -m bench vs_trl.one_batch`` shows that the two compute the same update for the same batch; this checks the
other half of a step, the samples the update is computed from. From the tiny model's warm start of
``--model-seed`` (no optimizer step on either side), every prompt of the tiny setup's data is sampled
``group`` times per pass, ``--passes`` passes, in batches of the setup's ``prompts``:

- skyrl-nb: the engine's generator role (``build(...).workers.generate``, the path ``RLTrainer`` samples
  and scores with: the torch sampler, the chat prompt, the decode, the arithmetic env's reward);
- TRL: ``GRPOTrainer`` built as ``vs_trl.trl_side`` builds it, through its own
  ``_generate_and_score_completions`` (its prompt tokenisation, ``model.generate`` with its
  ``GenerationConfig``, its EOS masking, decode and reward call); the reward is the mean TRL logs per batch.

Reported per side: the mean reward with its standard error (over batch means: the samples of a batch share
prompts), the mean completion length and the share that ended at EOS, how the groups split (how many of a
prompt's samples are right: a group all right or all wrong gives no learning signal), and the difference of the means in
standard errors. Same distribution: the difference is noise (|z| below about 2). From the warm starts every
completion is a digit or two and EOS; ``--noise S`` samples from a copy of the model with N(0, S) added to its
weights (the same copy on both sides), whose completions run to the length cap, so padding, truncation and the
EOS handling are compared too.

    .venv/bin/python -m bench vs_trl.sampler --model-seed 2 --out bench/results/vs_trl_sampler.json
    .venv/bin/python -m bench vs_trl.sampler --model-seed 2 --noise 0.1 --out bench/results/vs_trl_sampler_noisy.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

from bench import (
    vs_trl,  # noqa: E402
)

SETUP = vs_trl.SETUPS["tiny"]


def batches(rows: list, passes: int) -> list[list]:
    """Every row once per pass, in the data's order, cut into the setup's batches of prompts."""
    p = SETUP["prompts"]
    return [rows[i:i + p] for _ in range(passes) for i in range(0, len(rows) - p + 1, p)]


def skyrl_part(work: str, model_dir: str, seed: int, passes: int) -> None:
    """The engine's generator role over every batch -> ``<work>/skyrl.json``."""
    from skyrl_engine.build import build
    from skyrl_engine.types import step_seed

    engine = build(vs_trl.skyrl_config(SETUP, 1, 1, seed, work, model_dir), model_path=model_dir, val_rows=[],
                   total_steps=1, in_process=True)
    cfg, rows, workers = engine.cfg, engine.train_rows, engine.workers
    n = SETUP["group"]
    rewards, lengths, stopped, groups = [], [], 0, []
    for i, batch in enumerate(batches(rows, passes)):
        out = workers.generate(batch, n, cfg.generator.sampling_params, step_seed(seed, i + 1))
        rewards.append(statistics.fmean(out.rewards_B))
        groups += [sum(out.rewards_B[g * n:(g + 1) * n]) for g in range(len(batch))]
        lengths += out.samples.response_mask_BT.sum(1).tolist()
        stopped += out.samples.finish_reasons.count("stop")
    workers.shutdown()
    Path(work, "skyrl.json").write_text(json.dumps({"batch_rewards": rewards, "lengths": lengths, "stopped": stopped,
                                                    "group_successes": groups}))


def trl_part(work: str, model_dir: str, seed: int, passes: int) -> None:
    """TRL's own sampling and scoring over every batch -> ``<work>/trl.json`` (the TRL env's python)."""
    import torch

    from skyrl_engine.tasks import load_prompts

    torch.set_num_threads(1)
    torch.manual_seed(seed)
    rows = load_prompts([SETUP["data"]])
    rule, scored = vs_trl.trl_reward(SETUP), []

    def reward(completions, ground_truth, **_):  # trl_trainer's default rule, each batch's rewards kept
        scored.append(rule(completions, ground_truth))
        return scored[-1]

    trainer = vs_trl.trl_trainer(SETUP, model_dir, vs_trl.trl_config(SETUP, 1, seed, os.path.join(work, "trl_out")), reward)
    trainer.model.train()  # as in TRL's training loop
    trainer.current_gradient_accumulation_steps = 1
    n = SETUP["group"]
    eos = trainer.processing_class.eos_token_id
    rewards, lengths, stopped, groups = [], [], 0, []
    for batch in batches(rows, passes):
        out = trainer._generate_and_score_completions(
            [{"prompt": r.prompt, "ground_truth": str(r.ground_truth)} for r in batch for _ in range(n)])
        rewards.append(float(trainer._metrics["train"]["reward"][-1]))
        groups += [sum(scored[-1][g * n:(g + 1) * n]) for g in range(len(batch))]
        lengths += out["completion_mask"].sum(1).tolist()
        stopped += int(((out["completion_ids"] == eos) & out["completion_mask"].bool()).any(1).sum())
    Path(work, "trl.json").write_text(json.dumps({"batch_rewards": rewards, "lengths": lengths, "stopped": stopped,
                                                  "group_successes": groups}))


def noised_copy(model_dir: str, noise: float) -> str:
    """A copy of ``model_dir`` (tokenizer and all) whose weights have N(0, ``noise``) added (torch seed 123)."""
    import shutil
    import tempfile

    import torch
    from transformers import AutoModelForCausalLM

    out = os.path.join(tempfile.mkdtemp(prefix="skyrl-bench-noised-"), "model")
    shutil.copytree(model_dir, out)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    vs_trl.add_noise(model, noise)
    model.save_pretrained(out)
    return out


def summary(side: dict) -> dict:
    r, n = side["batch_rewards"], SETUP["group"]
    return {"batches": len(r), "samples": len(side["lengths"]), "reward_mean": round(statistics.fmean(r), 5),
            "reward_std_error": round(statistics.stdev(r) / len(r) ** 0.5, 5),
            "completion_tokens_mean": round(statistics.fmean(side["lengths"]), 4),
            "ended_at_eos": round(side["stopped"] / len(side["lengths"]), 5),
            # the learning signal: groups whose samples disagree (all right or all wrong give zero advantages)
            "groups_mixed": round(sum(1 for k in side["group_successes"] if 0 < k < n) / len(side["group_successes"]), 5),
            "groups_by_successes": [side["group_successes"].count(k) for k in range(n + 1)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-seed", type=int, default=2, help="the tiny model's warm start")
    parser.add_argument("--passes", type=int, default=1, help="passes over the data (each prompt x group per pass)")
    parser.add_argument("--noise", type=float, default=0.0,
                        help="sample from a copy of the model with N(0, S) added to its weights (longer, truncated "
                             "completions: padding and the length cap exercised)")
    parser.add_argument("--out", default=None)
    parser.add_argument("--part", choices=["skyrl", "trl"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:
        (skyrl_part if args.part == "skyrl" else trl_part)(args.workdir, args.model_dir, args.model_seed, args.passes)
        return 0
    model_dir = vs_trl.model_dir_for(SETUP, args.model_seed)  # built once, here, before either side reads it
    if args.noise:
        model_dir = noised_copy(model_dir, args.noise)
    work = vs_trl.run_parts("bench.vs_trl.sampler", ["skyrl", "trl"], ["--model-seed", str(args.model_seed), "--model-dir", model_dir,
                                                  "--passes", str(args.passes)])
    sides = {k: summary(json.loads(Path(work, f"{k}.json").read_text())) for k in ("skyrl", "trl")}
    diff = sides["skyrl"]["reward_mean"] - sides["trl"]["reward_mean"]
    se = (sides["skyrl"]["reward_std_error"] ** 2 + sides["trl"]["reward_std_error"] ** 2) ** 0.5
    result = {"bench": "vs_trl_sampler", "model_seed": args.model_seed, "noise": args.noise, "passes": args.passes, "group": SETUP["group"],
              "max_new": SETUP["max_new"], "temperature": SETUP["temperature"],
              "skyrl_nb": sides["skyrl"], "trl": sides["trl"],
              "reward_diff": round(diff, 5), "reward_diff_std_error": round(se, 5), "reward_diff_z": round(diff / se, 2)}
    vs_trl.report(result, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
