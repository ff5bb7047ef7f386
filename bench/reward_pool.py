"""Reward functions from a cell in the engine's reward stage: does the thread pool hide a slow reward's latency,
and what does the stage cost with a trivial function? One run, the arms interleaved step by step.

Every arm is the ``quickstart`` preset (its batch size, ``n``, model and built-in arithmetic data; seed 42, one
seed), trained in this process (``build(cfg, in_process=True)``: the generator, and so the reward stage, runs here):

- ``builtin``: the built-in arithmetic environment scores;
- ``slow``: a per-sample reward function that sleeps ``--sleep-ms`` (20) and then scores exactly like the built-in
  environment (exact match with the ground truth), in the pool's default ``reward.max_workers``;
- ``slow_wide``: the same function with ``reward.max_workers`` = the step's samples (``--wide-workers``);
- ``trivial``: the same exact match without the sleep.

Because each arm scores exactly like the built-in environment, all arms see the same rewards, so the same updates
and the same batches (the preset's dynamic sampling included): their steps are paired. Each measured step runs
every arm once, the order rotated each step; the first ``--warmup`` steps are not counted. A step's time is the
wall time of ``RLTrainer.train_one_step``; the reward stage's time is measured directly, by wrapping
``RewardPool.score`` (the function arms) and the per-sample ``score_response`` (the built-in arm) in this process.

Goals (issue 35): ``slow`` step ≤ 1.3× ``builtin`` step; ``trivial``'s reward stage < 5 % of its step.

    .venv/bin/python -m bench reward_pool [--steps 40] [--sleep-ms 20]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

from bench import RESULTS

SLOW_GOAL = 1.3
TRIVIAL_SHARE_GOAL = 0.05


def exact_match(prompt: Any, completion: str, ground_truth: Any, **_: Any) -> float:
    """The built-in arithmetic environment's rule: the completion is exactly the answer, whitespace aside."""
    return 1.0 if completion.strip() == str(ground_truth).strip() else 0.0


def slow_reward(seconds: float):
    """:func:`exact_match` after ``seconds`` of sleep (an API call's latency)."""

    def exact_slow(prompt: Any, completion: str, ground_truth: Any, **_: Any) -> float:
        time.sleep(seconds)
        return 1.0 if completion.strip() == str(ground_truth).strip() else 0.0

    return exact_slow


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="measured steps per arm")
    parser.add_argument("--warmup", type=int, default=1, help="steps per arm run first and not counted")
    parser.add_argument("--sleep-ms", type=float, default=20.0)
    parser.add_argument("--wide-workers", type=int, default=0,
                        help="reward.max_workers of the slow_wide arm (0: the step's samples; -1: no such arm)")
    parser.add_argument("--out", default=str(RESULTS / "reward_pool.json"))
    args = parser.parse_args(argv)

    from skyrl_core.config import load_config
    from skyrl_core.user_inputs import JobInputs
    from skyrl_engine import generator as generator_module
    from skyrl_engine.build import build
    from skyrl_engine.models import resolve_model_path
    from skyrl_engine.policy import set_torch_threads
    from skyrl_engine.rewards import RewardPool
    from skyrl_engine.tasks import load_prompts

    tmp = tempfile.mkdtemp(prefix="bench-reward-pool-")
    total_steps = args.warmup + args.steps
    base = [f"run.run_root={tmp}", "trainer.eval_interval=0", "trainer.eval_before_train=false",
            "trainer.ckpt_interval=0", f"trainer.max_training_steps={total_steps + 1}"]
    cfg0 = load_config("quickstart", [*base, "run.run_id=builtin"])
    set_torch_threads(int(cfg0.trainer.num_threads) or 1)
    train = load_prompts(cfg0.data.train_data, cfg0.environment.env_class)
    model_path = resolve_model_path(cfg0.trainer.policy.model.path, train, cfg0.trainer.seed)
    total = cfg0.total_steps(len(train))
    t, g = cfg0.trainer, cfg0.generator
    samples = t.train_batch_size * g.n_samples_per_prompt
    wide = samples if args.wide_workers == 0 else args.wide_workers

    sleep_s = args.sleep_ms / 1000.0
    arms: dict[str, tuple[Any, list[str]]] = {"builtin": (None, []), "slow": (slow_reward(sleep_s), []),
                                              "trivial": (exact_match, [])}
    if wide > 0:
        arms["slow_wide"] = (slow_reward(sleep_s), [f"reward.max_workers={min(wide, 256)}"])
    trainers: dict[str, Any] = {}
    for name, (fn, extra) in arms.items():
        inputs = JobInputs.gather(reward=[fn]) if fn is not None else None
        cfg = load_config("quickstart", [*base, f"run.run_id={name}", *(inputs.overrides() if inputs else []), *extra])
        if inputs is not None:
            inputs.stage(str(cfg.run_dir))
        trainers[name] = build(cfg, model_path=model_path, train_rows=train, val_rows=[], total_steps=total,
                               in_process=True).trainer
    workers = {name: cfg_workers(trainers[name]) for name in trainers}

    # the reward stage's wall time, measured here: RewardPool.score for the function arms, score_response per
    # sample for the built-in environment (each row's env is made, stepped and closed there)
    reward_s = {"now": 0.0}
    real_score, real_response = RewardPool.score, generator_module.score_response

    def timed_score(self, *a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_score(self, *a, **k)
        finally:
            reward_s["now"] += time.perf_counter() - started

    def timed_response(*a: Any, **k: Any) -> Any:
        started = time.perf_counter()
        try:
            return real_response(*a, **k)
        finally:
            reward_s["now"] += time.perf_counter() - started

    RewardPool.score = timed_score  # type: ignore[method-assign]
    generator_module.score_response = timed_response

    names = list(trainers)
    rows: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    loads = [os.getloadavg()[0]]
    try:
        for step in range(1, total_steps + 1):
            order = names[step % len(names):] + names[: step % len(names)]
            for name in order:
                reward_s["now"] = 0.0
                started = time.perf_counter()
                metrics = trainers[name].train_one_step(step)
                step_s = time.perf_counter() - started
                if step > args.warmup:
                    rows[name].append({"step_s": step_s, "reward_stage_s": reward_s["now"],
                                       "generate_s": float(metrics.get("timing/generate", float("nan"))),
                                       "reward_mean": _reward_mean(metrics)})
            loads.append(os.getloadavg()[0])
    finally:
        RewardPool.score, generator_module.score_response = real_score, real_response  # type: ignore[method-assign]

    def med(name: str, key: str) -> float:
        return statistics.median(r[key] for r in rows[name])

    def paired(name: str, key: str = "step_s") -> float:
        return statistics.median(a[key] / b[key] for a, b in zip(rows[name], rows["builtin"], strict=True))

    share = statistics.median(r["reward_stage_s"] / r["step_s"] for r in rows["trivial"])
    slow_ratio = med("slow", "step_s") / med("builtin", "step_s")
    same_rewards = all(len({round(rows[n][i]["reward_mean"], 9) for n in names}) == 1 for i in range(args.steps))
    result: dict[str, Any] = {
        "bench": "reward_pool",
        "steps_per_arm": args.steps,
        "warmup_steps": args.warmup,
        "seeds": [int(t.seed)],
        "batch": f"{t.train_batch_size} prompts x {g.n_samples_per_prompt} samples, max "
                 f"{g.sampling_params.max_generate_length} tokens (quickstart preset)",
        "sleep_ms": args.sleep_ms,
        "max_workers": workers,
        "arms_see_the_same_rewards": same_rewards,
        "step_s_median": {n: round(med(n, "step_s"), 4) for n in names},
        "reward_stage_s_median": {n: round(med(n, "reward_stage_s"), 4) for n in names},
        "reward_stage_share_median": {
            n: round(statistics.median(r["reward_stage_s"] / r["step_s"] for r in rows[n]), 4) for n in names},
        "generate_s_median": {n: round(med(n, "generate_s"), 4) for n in names},
        "slow_over_builtin": round(slow_ratio, 3),
        "slow_over_builtin_paired_median": round(paired("slow"), 3),
        "trivial_over_builtin": round(med("trivial", "step_s") / med("builtin", "step_s"), 3),
        "trivial_reward_stage_share": round(share, 4),
        "goals": {"slow_over_builtin_max": SLOW_GOAL, "trivial_share_max": TRIVIAL_SHARE_GOAL},
        "slow_goal_met": slow_ratio <= SLOW_GOAL,
        "trivial_goal_met": share < TRIVIAL_SHARE_GOAL,
        "machine": f"{_cpu_name()}, {os.cpu_count()} cores",
        "load_avg_1m": [round(min(loads), 2), round(max(loads), 2)],
        "per_step": {n: [{k: round(v, 5) for k, v in r.items()} for r in rows[n]] for n in names},
    }
    if "slow_wide" in rows:
        wide_ratio = med("slow_wide", "step_s") / med("builtin", "step_s")
        result["slow_wide_over_builtin"] = round(wide_ratio, 3)
        result["slow_wide_over_builtin_paired_median"] = round(paired("slow_wide"), 3)
        result["slow_wide_goal_met"] = wide_ratio <= SLOW_GOAL
    out = args.out
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as fh:
        fh.write(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "per_step"}))
    return 0


def cfg_workers(trainer: Any) -> int | None:
    """``reward.max_workers`` of a trainer's run (None for the built-in environment's arm)."""
    reward = trainer.cfg.reward
    return int(reward.max_workers) if reward.functions else None


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            return next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        import platform

        return platform.processor() or "unknown CPU"


def _reward_mean(metrics: dict[str, Any]) -> float:
    for key in ("reward/avg_raw_reward", "reward/mean", "generate/avg_reward"):
        if key in metrics:
            return float(metrics[key])
    return float("nan")


if __name__ == "__main__":
    sys.exit(main())
