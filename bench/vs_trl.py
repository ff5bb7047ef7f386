"""skyrl-nb vs TRL's GRPOTrainer: tokens/s and reward reached, same model, task, group, batch, steps.

Both sides start from the same warm-started built-in tiny model on the built-in arithmetic task and
run ``--steps`` GRPO steps of 16 prompts × 8 samples (≤ 8 new tokens, temperature 1), lr 1e-4
constant, no KL, clip 0.2, token-mean loss, one update per batch, one process, ``--threads`` torch
threads. TRL runs in its own env (``scripts/make_trl_env.sh``) as a subprocess of this script.

tokens/s = (prompt + completion tokens of every sample) / wall-clock of the training loop.
reward = mean training reward over the last ``--tail`` steps (and the first, for the rise).

    .venv/bin/python bench/vs_trl.py --steps 60 --out bench/results/vs_trl.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "backend"))
PROMPTS_PER_STEP, GROUP, MAX_NEW, LR = 16, 8, 8, 1e-4


def skyrl_side(steps: int, threads: int, run_root: str) -> dict:
    """The engine's loop in this process (in-process Workers: generator and policy model copies)."""
    from skyrl_core.config import load_config
    from skyrl_core.runs import RunReader, RunWriter
    from skyrl_engine.models import load_tokenizer, resolve_model_path
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.trainer import RLTrainer
    from skyrl_engine.workers import Workers

    cfg = load_config("quickstart", [
        f"run.run_root={run_root}", "run.run_id=skyrl", f"trainer.max_training_steps={steps}",
        f"trainer.num_threads={threads}", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=0", f"trainer.train_batch_size={PROMPTS_PER_STEP}",
        f"trainer.policy_mini_batch_size={PROMPTS_PER_STEP}", f"generator.n_samples_per_prompt={GROUP}",
        f"generator.sampling_params.max_generate_length={MAX_NEW}", f"trainer.policy.optimizer_config.lr={LR}",
        "trainer.policy.optimizer_config.scheduler=constant",
    ])
    train = load_prompts(cfg.data.train_data, "arithmetic")
    model_dir = resolve_model_path(cfg.trainer.policy.model.path, train, cfg.trainer.seed)
    workers = Workers.create(cfg, model_dir, cfg.total_steps(len(train)), in_process=True)  # trainer.num_threads
    trainer = RLTrainer(cfg, RunWriter(cfg.run_dir), workers, train, [])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    reader = RunReader(cfg.run_dir)
    tok = load_tokenizer(model_dir)
    prompt_len = {}
    tokens = 0
    for step in reader.trajectory_steps():
        frame = reader.trajectories(step)
        for prompt, n_tokens in zip(frame["prompt"], frame["num_tokens"], strict=True):
            if prompt not in prompt_len:  # the trajectory's prompt is the sampler's prompt, decoded
                prompt_len[prompt] = len(tok(prompt, add_special_tokens=False)["input_ids"])
            tokens += prompt_len[prompt] + int(n_tokens)
    rewards = [r["reward/avg_raw_reward"] for r in reader.metrics()]
    return {"wall_s": wall, "tokens": tokens, "rewards": rewards, "model_dir": model_dir}


def trl_side(model_dir: str, rows_file: str, steps: int, threads: int, out_dir: str) -> dict:
    """TRL's GRPOTrainer in this process (this must be the TRL env's python)."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(threads)
    rows = json.loads(Path(rows_file).read_text())
    data = Dataset.from_list([{"prompt": r["prompt"], "ground_truth": r["ground_truth"]} for r in rows])

    def exact_answer(completions, ground_truth, **_):
        return [1.0 if c[0]["content"].strip() == str(g).strip() else 0.0 for c, g in zip(completions, ground_truth, strict=True)]

    rewards: list[float] = []

    class KeepRewards(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "reward" in logs:
                rewards.append(float(logs["reward"]))

    args = GRPOConfig(
        output_dir=out_dir, use_cpu=True, max_steps=steps, learning_rate=LR, lr_scheduler_type="constant",
        warmup_steps=0, weight_decay=0.0, max_grad_norm=1.0, per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
        gradient_accumulation_steps=1, steps_per_generation=1, num_generations=GROUP, num_iterations=1,
        max_completion_length=MAX_NEW, temperature=1.0, top_p=1.0, beta=0.0, epsilon=0.2, loss_type="dapo",
        scale_rewards="group", logging_steps=1, report_to="none", save_strategy="no", seed=42,
        dataloader_num_workers=0, disable_tqdm=True, bf16=False,
    )
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=exact_answer, args=args, train_dataset=data,
                          processing_class=tok, callbacks=[KeepRewards()])
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    tokens = int(trainer.state.num_input_tokens_seen)
    return {"wall_s": wall, "tokens": tokens, "rewards": rewards}


def _summary(side: dict, tail: int) -> dict:
    rewards = side["rewards"]
    k = max(1, min(tail, len(rewards)))
    return {
        "steps": len(rewards),
        "wall_s": round(side["wall_s"], 2),
        "tokens": side["tokens"],
        "tokens_per_s": round(side["tokens"] / side["wall_s"], 1),
        "reward_first": round(sum(rewards[:k]) / k, 4),
        "reward_last": round(sum(rewards[-k:]) / k, 4),
    }


def main(argv: list[str] | None = None) -> int:
    """Run skyrl-nb, then TRL; print (and optionally write) one JSON object."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tail", type=int, default=10, help="steps averaged for the reward reached")
    parser.add_argument("--out", default=None)
    parser.add_argument("--side", choices=["trl"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--rows", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.side == "trl":
        print(json.dumps(trl_side(args.model, args.rows, args.steps, args.threads, args.workdir)))
        return 0

    from skyrl_engine.tasks import load_prompts

    work = tempfile.mkdtemp(prefix="skyrl-bench-trl-")
    try:
        result: dict = {"steps": args.steps, "prompts_per_step": PROMPTS_PER_STEP, "group": GROUP,
                        "max_new_tokens": MAX_NEW, "lr": LR, "threads": args.threads,
                        "load_avg_1m_before": os.getloadavg()[0]}
        skyrl = skyrl_side(args.steps, args.threads, work)
        rows = [{"prompt": r.prompt, "ground_truth": r.ground_truth} for r in load_prompts(["builtin://arithmetic/train"])]
        rows_file = os.path.join(work, "rows.json")
        Path(rows_file).write_text(json.dumps(rows))
        trl_python = os.environ.get("SKYRL_TRL_PYTHON") or subprocess.run(
            ["bash", str(ROOT / "scripts" / "make_trl_env.sh")], capture_output=True, text=True, check=True
        ).stdout.strip().splitlines()[-1]
        done = subprocess.run(
            [trl_python, __file__, "--side", "trl", "--model", skyrl["model_dir"], "--rows", rows_file,
             "--steps", str(args.steps), "--threads", str(args.threads), "--workdir", os.path.join(work, "trl")],
            capture_output=True, text=True, timeout=3600,
        )
        if done.returncode != 0:
            raise SystemExit(f"TRL side failed (exit {done.returncode}): {done.stderr[-3000:]}")
        trl = json.loads(done.stdout.strip().splitlines()[-1])
        result["skyrl_nb"] = _summary(skyrl, args.tail)
        result["trl"] = _summary(trl, args.tail)
        result["tokens_per_s_ratio"] = round(result["skyrl_nb"]["tokens_per_s"] / result["trl"]["tokens_per_s"], 3)
        result["rewards"] = {"skyrl_nb": skyrl["rewards"], "trl": trl["rewards"]}
        result["load_avg_1m_after"] = os.getloadavg()[0]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps({k: v for k, v in result.items() if k != "rewards"}, indent=1))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
