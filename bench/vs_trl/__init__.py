"""skyrl-nb vs TRL's GRPOTrainer: tokens/s and reward reached, same model, task, group, batch, steps.

Two set-ups (``--model``):

- ``tiny``: the warm-started built-in tiny model on the built-in arithmetic task, 16 prompts × 8
  samples, ≤ 8 new tokens, temperature 1, lr 1e-4; reward: the exact answer (the arithmetic env's rule);
- ``smollm2``: SmolLM2-135M-Instruct (``builtin://smollm2-135m-instruct``) on the built-in word
  problems, 8 prompts × 4 samples, ≤ 48 new tokens, temperature 0.7 (the ``smollm2`` preset's), full
  fine-tuning at lr 1e-5 (the preset's documented full-FT rate); reward: the last number of the answer
  (skyrl-gym's gsm8k flexible extraction, ``skyrl_engine.tasks.flexible_answer``).

On both sides: lr constant, no KL (TRL ``beta=0``), clip 0.2, token-mean loss (TRL ``loss_type="dapo"``),
group-normalised advantages, one update per batch, gradient clipping at 1.0, fp32, one process,
``--threads`` torch threads. Each side runs as its own subprocess (skyrl-nb's ``RLTrainer`` with
in-process workers in ``.venv``; TRL in its env, ``scripts/make_trl_env.sh``), and only its training
loop is timed. For every seed of ``--seeds`` both sides run, in alternating order (the first seed
skyrl-nb first, the next TRL first, ...), so a change in the machine's load falls on both.

tokens/s = (prompt + completion tokens of every sample) / wall-clock of the loop; the summary takes
the median over seeds. reward = mean training reward of the last ``--tail`` steps, the same number
of samples on both sides; the summary takes the mean over seeds. A side whose loop ran under a
minute is flagged (``short_loops``): its tokens/s swings with the load.

    .venv/bin/python -m bench vs_trl --model tiny --steps 1200 --seeds 42,1,2,3,4 --out bench/results/vs_trl.json
    .venv/bin/python -m bench vs_trl --model tiny --steps 1200 --seeds 5,6,7 --model-seed 2 --out bench/results/vs_trl_warm2_seeds.json
    .venv/bin/python -m bench vs_trl --model smollm2 --steps 4 --seeds 42,1 --out bench/results/vs_trl_smollm2.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import ROOT, child_env, module_command

SETUPS: dict[str, dict] = {
    "tiny": {"preset": "quickstart", "data": "builtin://arithmetic/train", "prompts": 16, "group": 8,
             "max_new": 8, "temperature": 1.0, "lr": 1e-4, "overrides": []},
    "smollm2": {"preset": "smollm2", "data": "builtin://word_problems/train", "prompts": 8, "group": 4,
                "max_new": 48, "temperature": 0.7, "lr": 1e-5, "overrides": ["trainer.policy.model.lora.rank=0"]},
}
MIN_LOOP_S = 60.0
TOKENS_PER_S_GOAL = 3.0  # issue 38: skyrl-nb at least 3x TRL's tokens/s


def skyrl_config(setup: dict, steps: int, threads: int, seed: int, run_root: str, model_dir: str = ""):
    """skyrl-nb's JobConfig for ``setup``: the settings both sides share (module docstring), no eval, no checkpoints;
    ``model_dir``: the model to start from (default: the setup's, warm-started at ``seed`` for the tiny model)."""
    from skyrl_core.config import load_config

    n = setup["prompts"]
    return load_config(setup["preset"], [
        f"run.run_root={run_root}", "run.run_id=skyrl", f"trainer.max_training_steps={steps}", f"trainer.seed={seed}",
        f"trainer.num_threads={threads}", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=0", f"trainer.train_batch_size={n}", f"trainer.policy_mini_batch_size={n}",
        f"trainer.micro_train_batch_size_per_gpu={n * setup['group']}",
        f"trainer.micro_forward_batch_size_per_gpu={n * setup['group']}",
        f"generator.n_samples_per_prompt={setup['group']}",
        f"generator.sampling_params.max_generate_length={setup['max_new']}",
        f"generator.sampling_params.temperature={setup['temperature']}",
        f"trainer.policy.optimizer_config.lr={setup['lr']}", "trainer.policy.optimizer_config.scheduler=constant",
        "trainer.policy.optimizer_config.max_grad_norm=1.0", *setup["overrides"],
        *([f"trainer.policy.model.path={model_dir}"] if model_dir else []),
    ])


def skyrl_trainer(setup: dict, steps: int, threads: int, seed: int, run_root: str, model_dir: str = "") -> tuple[Any, str]:
    """``(trainer, model_dir)``: the engine's ``RLTrainer`` for :func:`skyrl_config`, its generator and policy in this
    process (``trainer.num_threads`` threads), and the model directory it starts from."""
    from skyrl_engine.build import build

    engine = build(skyrl_config(setup, steps, threads, seed, run_root, model_dir), val_rows=[], in_process=True)
    return engine.trainer, engine.model_path


def skyrl_side(setup: dict, steps: int, threads: int, seed: int, run_root: str, model_dir: str = "") -> dict:
    """The engine's loop (:func:`skyrl_trainer`), timed."""
    from skyrl_core.runs import RunReader
    from skyrl_engine.models import encode_prompt, load_tokenizer

    trainer, model_dir = skyrl_trainer(setup, steps, threads, seed, run_root, model_dir)
    cfg = trainer.cfg
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    reader = RunReader(cfg.run_dir)
    tok = load_tokenizer(model_dir)
    tokens = 0
    for step in reader.trajectory_steps():  # each prompt of the step's batch (the loader's) once per sample
        prompts = sum(len(encode_prompt(tok, row.prompt)) for row in trainer.loader.batch(step))
        tokens += prompts * setup["group"] + int(reader.trajectories(step)["num_tokens"].sum())
    rewards = [r["reward/avg_raw_reward"] for r in reader.metrics()]
    return {"wall_s": wall, "tokens": tokens, "rewards": rewards, "model_dir": model_dir}


def reward_rule(setup: dict):
    """``score(text, truth) -> float``, the setup's reward as skyrl-nb's envs give it (both sides score with it)."""
    from skyrl_engine.tasks import _arithmetic_reward, flexible_answer

    if setup["preset"] == "quickstart":
        return _arithmetic_reward
    return lambda text, truth: 1.0 if flexible_answer(text) == truth.strip() else 0.0


def trl_config(setup: dict, steps: int, seed: int, out_dir: str):
    """TRL's ``GRPOConfig`` for ``setup``: the settings both sides share (module docstring)."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=out_dir, use_cpu=True, max_steps=steps, learning_rate=setup["lr"], lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, per_device_train_batch_size=setup["prompts"] * setup["group"],
        gradient_accumulation_steps=1, steps_per_generation=1, num_generations=setup["group"], num_iterations=1,
        max_completion_length=setup["max_new"], temperature=setup["temperature"], top_p=1.0, beta=0.0, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", logging_steps=1, report_to="none", save_strategy="no", seed=seed,
        dataloader_num_workers=0, disable_tqdm=True, bf16=False,
    )


def trl_reward(setup: dict) -> Any:
    """:func:`reward_rule` in TRL's reward-function signature (conversational completions, the dataset's
    ``ground_truth`` column)."""
    score = reward_rule(setup)

    def reward(completions, ground_truth, **_):
        return [score(c[0]["content"], g) for c, g in zip(completions, ground_truth, strict=True)]

    return reward


def add_noise(model: Any, noise: float) -> None:
    """Add N(0, ``noise``) to every weight of ``model`` in place, from torch seed 123 (the benches' noised policy)."""
    import torch

    torch.manual_seed(123)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * noise)


def trl_trainer(setup: dict, model_dir: str, args: Any, reward: Any = None, callbacks: tuple = ()) -> Any:
    """TRL's ``GRPOTrainer`` for ``setup`` (this must be the TRL env's python): the model of ``model_dir`` in fp32,
    the setup's data, ``args`` (:func:`trl_config`), scored by :func:`reward_rule` unless ``reward`` (TRL's
    reward-function signature) replaces it."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from skyrl_engine.tasks import load_prompts

    rows = load_prompts([setup["data"]])
    data = Dataset.from_list([{"prompt": r.prompt, "ground_truth": str(r.ground_truth)} for r in rows])
    return GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32),
                       reward_funcs=reward or trl_reward(setup),
                       args=args, train_dataset=data, processing_class=AutoTokenizer.from_pretrained(model_dir),
                       callbacks=list(callbacks))


def trl_side(setup: dict, model_dir: str, steps: int, threads: int, seed: int, out_dir: str) -> dict:
    """TRL's GRPOTrainer in this process (this must be the TRL env's python)."""
    import torch
    from transformers import TrainerCallback

    torch.set_num_threads(threads)
    rewards: list[float] = []

    class KeepRewards(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    trainer = trl_trainer(setup, model_dir, trl_config(setup, steps, seed, out_dir), callbacks=(KeepRewards(),))
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    return {"wall_s": wall, "tokens": int(trainer.state.num_input_tokens_seen), "rewards": rewards}


def trl_python() -> str:
    """The TRL env's python: ``$SKYRL_TRL_PYTHON``, else the env ``scripts/make_trl_env.sh`` builds (or finds)."""
    return os.environ.get("SKYRL_TRL_PYTHON") or subprocess.run(
        ["bash", str(ROOT / "scripts" / "make_trl_env.sh")], capture_output=True, text=True, check=True
    ).stdout.strip().splitlines()[-1]


def run_parts(module: str, parts: list[str], args: list[str]) -> str:
    """``python -m <module> --part P --workdir W *args`` for each part in turn, the ``trl`` part with the TRL env's python and
    the others with this one; returns the work directory W they share."""
    work = tempfile.mkdtemp(prefix=f"skyrl-bench-{module.rsplit('.', 1)[-1]}-")
    trl_env = trl_python() if "trl" in parts else ""
    for part in parts:
        subprocess.run(module_command(trl_env if part == "trl" else sys.executable, module,
                                      ["--part", part, "--workdir", work, *args]),
                       check=True, cwd=ROOT, env=child_env())
    return work


def report(result: dict, out: str | None, shown: dict | None = None) -> None:
    """Print ``shown`` (default: ``result``) and write ``result`` to ``out`` when given."""
    print(json.dumps(result if shown is None else shown, indent=1))
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps(result, indent=1) + "\n")


def model_dir_for(setup: dict, seed: int) -> str:
    """The model directory the engine trains for ``setup`` at ``seed`` (built into the model cache if missing).
    The built-in tiny model is warm-started at ``seed`` (the quickstart's own warm start is seed 42 whatever
    ``trainer.seed``: ``skyrl_engine.models.WARM_START_SEED``)."""
    from skyrl_core.config import load_config
    from skyrl_engine.models import TINY_MODEL, build_tiny_model, resolve_model_path
    from skyrl_engine.tasks import load_prompts

    cfg = load_config(setup["preset"], [f"trainer.seed={seed}", *setup["overrides"]])
    rows = load_prompts(cfg.data.train_data)
    if cfg.trainer.policy.model.path == TINY_MODEL:
        return build_tiny_model(rows, seed)
    return resolve_model_path(cfg.trainer.policy.model.path, rows, seed)


def _summary(side: dict, tail: int, load: tuple[float, float]) -> dict:
    rewards = side["rewards"]
    k = max(1, min(tail, len(rewards)))
    return {
        "steps": len(rewards),
        "wall_s": round(side["wall_s"], 2),
        "tokens": side["tokens"],
        "tokens_per_s": round(side["tokens"] / side["wall_s"], 1),
        "reward_first": round(sum(rewards[:k]) / k, 4),
        "reward_last": round(sum(rewards[-k:]) / k, 4),
        "load_avg_1m_before_after": [round(load[0], 2), round(load[1], 2)],
    }


def _run_side(python: str, side: str, args: argparse.Namespace, seed: int, work: str, model_dir: str = "") -> dict:
    """One side as its own subprocess; its JSON result (it prints one line last)."""
    cmd = module_command(python, "bench.vs_trl", [
        "--side", side, "--model", args.model, "--steps", str(args.steps), "--threads", str(args.threads),
        "--seeds", str(seed), "--workdir", os.path.join(work, f"{side}-{seed}"), "--model-dir", model_dir])
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=7200, cwd=ROOT, env=child_env())
    if done.returncode != 0:
        raise SystemExit(f"{side} side failed (exit {done.returncode}): {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    """Run both sides for every seed; print (and optionally write) one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(SETUPS), default="tiny")
    parser.add_argument("--steps", type=int, default=None, help="steps per side (default: tiny 400, smollm2 4)")
    parser.add_argument("--seeds", default="42", help="comma-separated seeds; both sides run for each")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tail", type=int, default=10, help="steps averaged for the reward reached")
    parser.add_argument("--model-seed", type=int, default=None,
                        help="tiny model: warm-start it at this seed for every seed of --seeds (default: each seed "
                             "its own warm start), so the seeds vary the data order and the sampling alone")
    parser.add_argument("--out", default=None)
    parser.add_argument("--side", choices=["skyrl", "trl"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    setup = SETUPS[args.model]
    args.steps = args.steps or {"tiny": 400, "smollm2": 4}[args.model]
    seeds = [int(s) for s in args.seeds.split(",")]

    if args.side == "skyrl":
        print(json.dumps(skyrl_side(setup, args.steps, args.threads, seeds[0], args.workdir, args.model_dir)))
        return 0
    if args.side == "trl":
        print(json.dumps(trl_side(setup, args.model_dir, args.steps, args.threads, seeds[0], args.workdir)))
        return 0

    trl_env = trl_python()
    work = tempfile.mkdtemp(prefix="skyrl-bench-trl-")
    per_seed: list[dict] = []
    curves: dict[str, list[float]] = {}
    try:
        for i, seed in enumerate(seeds):
            order = ["skyrl", "trl"] if i % 2 == 0 else ["trl", "skyrl"]
            found: dict[str, dict] = {}
            model_dir = "" if args.model_seed is None else model_dir_for(setup, args.model_seed)
            if order[0] == "trl" and not model_dir:  # TRL loads the engine's model directory (the tiny model's warm start is per seed)
                model_dir = model_dir_for(setup, seed)
            for side in order:
                before = os.getloadavg()[0]
                result = _run_side(sys.executable if side == "skyrl" else trl_env, side, args, seed, work,
                                   model_dir)
                model_dir = result.get("model_dir", model_dir)
                found[side] = {**_summary(result, args.tail, (before, os.getloadavg()[0])), "rewards": result["rewards"]}
            if not curves:
                curves = {"skyrl_nb": found["skyrl"]["rewards"], "trl": found["trl"]["rewards"]}
            per_seed.append({"seed": seed, "order": order, "skyrl_nb": found["skyrl"], "trl": found["trl"],
                             "tokens_per_s_ratio": round(found["skyrl"]["tokens_per_s"] / found["trl"]["tokens_per_s"], 3)})
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def side_summary(key: str) -> dict:
        runs = [s[key] for s in per_seed]
        return {"steps": args.steps, "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in runs), 1),
                "reward_first": round(statistics.fmean(r["reward_first"] for r in runs), 4),
                "reward_last": round(statistics.fmean(r["reward_last"] for r in runs), 4),
                "wall_s_min": min(r["wall_s"] for r in runs)}

    result = {
        "bench": "vs_trl", "model": args.model, "steps": args.steps, "seeds": seeds, "model_seed": args.model_seed,
        "prompts_per_step": setup["prompts"], "group": setup["group"], "max_new_tokens": setup["max_new"],
        "temperature": setup["temperature"], "lr": setup["lr"], "threads": args.threads,
        "skyrl_nb": side_summary("skyrl_nb"), "trl": side_summary("trl"),
        "per_seed": [{k: ({kk: vv for kk, vv in v.items() if kk != "rewards"} if isinstance(v, dict) else v)
                      for k, v in s.items()} for s in per_seed],
        "short_loops": [f"{side} seed {s['seed']}: {s[side]['wall_s']} s" for s in per_seed
                        for side in ("skyrl_nb", "trl") if s[side]["wall_s"] < MIN_LOOP_S],
        "rewards": curves,
        # every seed's curves (a single seed's last-10 reward can turn on one lucky or unlucky stretch)
        "rewards_by_seed": {str(s["seed"]): {side: [round(r, 4) for r in s[side]["rewards"]] for side in ("skyrl_nb", "trl")}
                            for s in per_seed},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"), "cpus": os.cpu_count(),
    }
    result["tokens_per_s_ratio"] = round(result["skyrl_nb"]["tokens_per_s"] / result["trl"]["tokens_per_s"], 3)
    result["goals"] = {"tokens_per_s_ratio_at_least_3": result["tokens_per_s_ratio"] >= TOKENS_PER_S_GOAL,
                       "reward_at_least_trl": result["skyrl_nb"]["reward_last"] >= result["trl"]["reward_last"]}
    report(result, args.out, {k: v for k, v in result.items() if k not in ("rewards", "per_seed")})
    return 0

