"""A policy on 1 vs 2 CPU ranks (issue 12): step time, policy-update time and tokens/s, side by side.

For each model (the quickstart's tiny Qwen2, and a ~10M-parameter Qwen2 of the same vocabulary) two
disaggregated quickstart runs are built at once, one with 1 policy worker and one with 2 FSDP2 ranks
(``trainer.placement.policy_num_gpus_per_node``), each with its own generator actor, and their steps
alternate (1, 2, 1, 2, ...) so load changes hit both alike. On a 2-core machine a speed-up is not
expected: the 2-rank figures are the overhead of the collective path (gloo all-gathers and
reduce-scatters every layer). Per-rank resident parameter + AdamW bytes come from the workers'
``policy/rank_resident_bytes_max``.

    .venv/bin/python -m bench scale_out [--steps 6] [--threads 1]

Its pieces (:func:`base_config`, :func:`bench_models`, :func:`compare_ranks`) also run the same comparison
on GPUs: ``python -m bench gpu_check --scale-out``. Prints one JSON line and writes it to
``bench/results/scale_out.json``. Needs 5 Ray CPUs (logical: it starts a private cluster with 5 on any
machine; only one run computes at a time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench import ROOT


def ten_million_model(base_dir: str, out_dir: str) -> str:
    """A ~10M-parameter Qwen2 with the tiny model's tokenizer (random init), saved under ``out_dir``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from skyrl_engine.models import load_tokenizer, param_count

    tokenizer = load_tokenizer(base_dir)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=256, num_hidden_layers=10, num_attention_heads=8,
                         num_key_value_heads=4, intermediate_size=1024, max_position_embeddings=512,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    print(f"10M model: {param_count(model) / 1e6:.1f}M parameters", flush=True)
    return out_dir


def base_config(run_root: str, steps: int, threads: int, overrides: Sequence[str] = ()) -> Any:
    """The quickstart, disaggregated, for ``steps`` measured steps after one warm-up, without evals or
    checkpoints, with its runs under ``run_root``; ``overrides`` (dotted ``key=value``) go last."""
    from skyrl_core.config import load_config

    return load_config("quickstart", [
        f"run.run_root={run_root}", "trainer.eval_interval=0", "trainer.eval_before_train=false",
        "trainer.ckpt_interval=0", f"trainer.num_threads={threads}", f"trainer.max_training_steps={steps + 1}",
        "trainer.resume_mode=none", "trainer.placement.colocate_all=false", "trainer.micro_train_batch_size_per_gpu=64",
        *overrides,
    ])


def bench_models(base: Any, out_dir: str) -> tuple[dict[str, str], list[Any]]:
    """``({"quickstart_tiny": dir, "qwen2_10m": dir}, train prompts)``: the two models the comparison
    trains (built under ``out_dir``) and the quickstart's training prompts."""
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.tasks import load_prompts

    train = load_prompts(base.data.train_data, base.environment.env_class)
    tiny = resolve_model_path(base.trainer.policy.model.path, train, base.trainer.seed)
    return {"quickstart_tiny": tiny, "qwen2_10m": ten_million_model(tiny, os.path.join(out_dir, "model-10m"))}, train


def ranks_overrides(ranks: int) -> list[str]:
    """What one arm changes in the base config: the policy's ranks on its one node."""
    return [f"trainer.placement.policy_num_gpus_per_node={ranks}"]


def compare_ranks(base: Any, models: dict[str, str], train: list[Any], rank_counts: Sequence[int] = (1, 2),
                  steps: int = 6, arm_overrides: Callable[[int], list[str]] = ranks_overrides,
                  interleave: bool = True) -> dict[str, Any]:
    """Train each model once per entry of ``rank_counts`` (the first is the baseline) on the connected Ray
    cluster and summarise the arms side by side: ``{model: {"ranks_<n>": {...}, "<metric>_<n>_over_<1>": x}}``.

    ``interleave`` builds every arm at once and alternates their steps (1, 2, 1, 2, ...) so load changes hit
    all alike (needs room for all arms at once); without it the arms run one after another, each alone
    on the cluster (a GPU machine has room for one arm of N GPUs at a time). The first step of each arm
    is a warm-up and is not measured.
    """
    total = steps + 1
    result: dict[str, Any] = {}
    for name, model_path in models.items():
        rows: dict[int, list[dict]] = {ranks: [] for ranks in rank_counts}
        for group in ([list(rank_counts)] if interleave else [[ranks] for ranks in rank_counts]):
            runs = {ranks: base.with_overrides([f"run.run_id={name}-{ranks}", *arm_overrides(ranks)]) for ranks in group}
            _train_arms(runs, model_path, train, total, rows)
        result[name] = summarize(rows)
        print(name, json.dumps(result[name]), flush=True)
    return result


def _train_arms(runs: dict[int, Any], model_path: str, train: list[Any], total: int,
                rows: dict[int, list[dict]]) -> None:
    """Build one trainer per config of ``runs`` at once, alternate their ``total`` steps, and append every
    step's metrics but the first (it pays for lazy start-up work) to ``rows``; shut them all down after."""
    from skyrl_engine.build import build

    trainers: dict[int, Any] = {}
    try:
        for ranks, cfg in runs.items():
            trainers[ranks] = build(cfg, model_path=model_path, train_rows=train, val_rows=[], total_steps=total,
                                    in_process=False).trainer
        for step in range(1, total + 1):
            for ranks, trainer in trainers.items():
                started = time.perf_counter()
                metrics = trainer.train_one_step(step)
                metrics["wall_s"] = time.perf_counter() - started
                if step > 1:
                    rows[ranks].append(metrics)
    finally:
        for trainer in trainers.values():
            trainer.workers.shutdown()


def summarize(rows: dict[int, list[dict]]) -> dict[str, Any]:
    """Medians per arm (``rows``: the measured steps' metrics of each rank count, baseline first) and each
    other arm's step time, policy-update time and per-rank resident bytes over the baseline's."""
    arms: dict[str, Any] = {}
    for ranks, measured in rows.items():
        step_s = statistics.median(r["wall_s"] for r in measured)
        # tokens trained per step (sequence tokens of the batch), over the whole step's wall time
        tokens = statistics.median(r["trainer/tokens_per_second"] * r["timing/policy_train"] for r in measured)
        arms[f"ranks_{ranks}"] = {
            "step_s_median": round(step_s, 3),
            "policy_train_s_median": round(statistics.median(r["timing/policy_train"] for r in measured), 3),
            "sync_weights_s_median": round(statistics.median(r["timing/sync_weights"] for r in measured), 3),
            "train_tokens_per_s_median": round(statistics.median(r["trainer/tokens_per_second"] for r in measured), 1),
            "step_tokens_per_s": round(tokens / step_s, 1),
            "rank_resident_bytes": int(measured[-1]["policy/rank_resident_bytes_max"]),
        }
    baseline, *others = rows
    one = arms[f"ranks_{baseline}"]
    for ranks in others:
        n = arms[f"ranks_{ranks}"]
        arms[f"step_time_{ranks}_over_{baseline}"] = round(n["step_s_median"] / one["step_s_median"], 2)
        arms[f"policy_train_{ranks}_over_{baseline}"] = round(n["policy_train_s_median"] / one["policy_train_s_median"], 2)
        arms[f"resident_bytes_{ranks}_over_{baseline}"] = round(n["rank_resident_bytes"] / one["rank_resident_bytes"], 2)
    return arms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=6, help="measured steps per arm (after one warm-up)")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)

    from skyrl_engine.ray_runtime import start_private_ray

    start_private_ray(num_cpus=5)
    tmp = tempfile.mkdtemp(prefix="bench-scale-out-")
    base = base_config(tmp, args.steps, args.threads)
    models, train = bench_models(base, tmp)
    result: dict = {"steps": args.steps, "threads": args.threads,
                    "models": compare_ranks(base, models, train, (1, 2), args.steps)}
    result["load_avg_1m"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result))
    out = ROOT / "bench" / "results" / "scale_out.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
