"""Each phase of a real training step against its floor on this machine: how far generation and training are
from what the hardware allows, measured in one run.

One command, one result file. In the same process, back to back:

1. **The machine**: fp32 and bf16 matmul throughput (GFLOP/s, best of several ``torch.mm`` at the model's own
   training shape ``[tokens, hidden] x [hidden, intermediate]``) and memory read bandwidth (GB/s, best of several sums
   over a buffer far larger than the caches), with the threads the engine uses.
2. **A real step**: the preset's steps through the engine in this process (``skyrl_engine.build``, every role
   here, ``trainer.num_threads`` threads), timed by the engine's own ``timing/*`` metrics; each step's real
   shapes (prompts, distinct prompts, every sample's response length) are kept from its rollouts.
3. **The floors** for those shapes, by a roofline: a phase can be no faster than its matmul FLOPs at the measured
   rate, nor than the bytes it must read at the measured bandwidth.

   - *prefill*: each distinct prompt once (the sampler shares a group's prefill): ``2 x linear params x prompt
     tokens`` plus the LM head for its last position;
   - *decode*: every token position of the batch reads all weights once (``4 x params`` bytes: fp32) and does
     ``2 x params`` FLOPs per live row; the position costs the larger of the two;
   - *forward* (the training pass's): ``2 x linear params`` per token of prompt and response, each distinct prompt
     once (``trainer.share_prompt_prefix``, on by default: the trainer passes a group's prompt once), the LM head over
     the response positions only (the only logits the loss needs);
   - *backward*: full fine-tuning ``2 x forward`` (input and weight gradients); LoRA ``1 x forward`` (input
     gradients through the frozen weights; the adapters' own are negligible);
   - with ``trainer.lora_base_precision`` at bf16 (the ``smollm2`` preset's ``auto`` on a CPU with AMX or
     AVX512-BF16) the decoder's frozen matmuls, forward and backward, count at the **bf16** rate, the head and
     attention at fp32's: the floor of the step as it computes, not of a float32 step;
   - *optimizer*: AdamW reads and writes parameter, gradient and both moments of every trainable weight.
   The attention products (``4 x layers x hidden x context`` per token) are added to each; they are small here.

``generate`` is compared with prefill + decode, ``policy_train`` with forward + backward + optimizer (plus an
extra no-grad forward when the algorithm needs old log-probs: several mini-batches or epochs). Ratios are the
median step's time over the floor of the same step's shapes. Steps 1 and 2 are reported but not counted (the first
pays one-time allocations).

    .venv/bin/python -m bench floor --model smollm2 [--lora | --full] [--steps 5] [--base-precision fp32]
    .venv/bin/python -m bench floor --model tiny --steps 20
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

from bench import RESULTS

#: model -> (preset, overrides). The smollm2 preset as users run it (LoRA rank 8); --full: the full fine-tune arm of
#: bench/real_model.py.
MODELS: dict[str, tuple[str, list[str]]] = {"smollm2": ("smollm2", []), "tiny": ("quickstart", [])}
FULL = ["trainer.policy.model.lora.rank=0", "trainer.policy.optimizer_config.lr=1e-05"]
GOALS = {"generate": 3.0, "policy_train": 1.5}  # issue 38: the smollm2 LoRA step, ratio to the floor at most


@dataclass
class Machine:
    threads: int
    matmul_gflops: float  # fp32, at the model's training shape
    matmul_bf16_gflops: float  # bf16 inputs (fp32 accumulation), the same shape: AMX where the CPU has it
    decode_gflops: float  # fp32, at the decode shape [rows, hidden] x [hidden, intermediate]
    read_gbs: float

    @classmethod
    def measure(cls, hidden: int, intermediate: int, tokens: int, rows: int) -> Machine:
        import torch

        def best_gflops(m: int, reps: int, dtype: Any = torch.float32) -> float:
            a, b = torch.randn(m, hidden, dtype=dtype), torch.randn(hidden, intermediate, dtype=dtype)
            a @ b  # warm
            best = float("inf")
            for _ in range(5):
                t = time.perf_counter()
                for _ in range(reps):
                    a @ b
                best = min(best, (time.perf_counter() - t) / reps)
            return 2 * m * hidden * intermediate / best / 1e9

        buf = torch.ones(512 * 2**20 // 4)  # 512 MiB: far past any cache
        buf.sum()
        best = float("inf")
        for _ in range(5):
            t = time.perf_counter()
            buf.sum()
            best = min(best, time.perf_counter() - t)
        return cls(torch.get_num_threads(), round(best_gflops(tokens, 3), 1),
                   round(best_gflops(tokens, 3, torch.bfloat16), 1), round(best_gflops(rows, 50), 1),
                   round(buf.numel() * 4 / best / 1e9, 2))


@dataclass
class Shapes:
    """What a model does per token, from its config: matmul parameters and what attention adds."""

    linear: int  # parameters in the decoder layers' matmuls
    head: int  # the LM head's (vocab x hidden), tied or not
    trainable: int
    total: int  # every parameter (what a decode step reads)
    layers: int
    hidden: int
    intermediate: int
    lora: bool

    @classmethod
    def of(cls, model: Any) -> Shapes:
        import torch

        c = model.config
        layers, hidden = c.num_hidden_layers, c.hidden_size
        linear = sum(m.weight.numel() for name, m in model.named_modules()
                     if isinstance(m, torch.nn.Linear) and ".layers." in name and "lora_" not in name)
        return cls(linear, c.vocab_size * hidden, sum(p.numel() for p in model.parameters() if p.requires_grad),
                   sum(p.numel() for p in model.parameters()), layers, hidden, c.intermediate_size,
                   any("lora_" in name for name, _ in model.named_parameters()))

    def attention_flops(self, context: int) -> float:
        return 4.0 * self.layers * self.hidden * context  # QK^T and AV for one token at this context


def generate_floor(s: Shapes, m: Machine, prompt_lens: list[int], distinct_prompt_lens: list[int],
                   response_lens: list[int]) -> dict[str, float]:
    """Seconds: prefill and decode of one step's rollouts (module docstring)."""
    flops = sum(2.0 * s.linear * p + 2.0 * s.head + s.attention_flops(p) * p / 2 for p in distinct_prompt_lens)
    prefill = flops / (m.matmul_gflops * 1e9)
    decode = 0.0
    width = max(prompt_lens)
    for t in range(max(response_lens)):
        live = sum(1 for n in response_lens if n > t)
        step_flops = live * (2.0 * (s.linear + s.head) + s.attention_flops(width + t))
        step_bytes = 4.0 * s.total + live * 2 * 4.0 * s.layers * s.hidden * (width + t) / 4  # weights + KV (GQA ~1/4)
        decode += max(step_flops / (m.decode_gflops * 1e9), step_bytes / (m.read_gbs * 1e9))
    return {"prefill": prefill, "decode": decode, "generate": prefill + decode}


def train_floor(s: Shapes, m: Machine, prompt_lens: list[int], distinct_prompt_lens: list[int], response_lens: list[int],
                extra_forward: bool, share_prompt: bool, bf16_base: bool = False) -> dict[str, float]:
    """Seconds: the policy update on one step's samples (module docstring). ``share_prompt``
    (``trainer.share_prompt_prefix``): each distinct prompt goes through the model once, as the trainer does;
    ``bf16_base``: LoRA's frozen decoder matmuls run in bf16 (``trainer.lora_base_precision``), at its rate."""
    prompts = distinct_prompt_lens if share_prompt else prompt_lens
    context = zip(prompt_lens, response_lens, strict=True)  # a response token attends over its prompt and what precedes it
    attention = (sum(s.attention_flops(p) * p / 2 for p in prompts)
                 + sum(s.attention_flops(p + r / 2) * r for p, r in context))
    linear_flops = 2.0 * s.linear * (sum(prompts) + sum(response_lens))
    other_flops = 2.0 * s.head * sum(response_lens) + attention
    rate, linear_rate = m.matmul_gflops * 1e9, (m.matmul_bf16_gflops if bf16_base else m.matmul_gflops) * 1e9
    forward = linear_flops / linear_rate + other_flops / rate
    backward = (1.0 if s.lora else 2.0) * forward
    optimizer = 4 * 2 * 4.0 * s.trainable / (m.read_gbs * 1e9)  # p, grad, m, v read and written, fp32
    out = {"forward": forward, "backward": backward, "optimizer": optimizer, "old_logprobs": forward if extra_forward else 0.0}
    out["policy_train"] = sum(out.values())
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="smollm2")
    arm = parser.add_mutually_exclusive_group()
    arm.add_argument("--lora", action="store_true", help="the preset's LoRA (default for smollm2)")
    arm.add_argument("--full", action="store_true", help="full fine-tuning (bench/real_model.py's full arm)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: every core, as the preset)")
    parser.add_argument("--base-precision", choices=["fp32", "bf16", "auto"], default=None,
                        help="trainer.lora_base_precision (default: the preset's); the result file gets its name")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)

    from skyrl_core.config import load_config
    from skyrl_engine.build import build
    from skyrl_engine.policy import set_torch_threads, single_pass

    preset, overrides = MODELS[args.model]
    overrides = [*overrides, *(FULL if args.full else []),
                 *([f"trainer.lora_base_precision={args.base_precision}"] if args.base_precision else [])]
    tmp = tempfile.mkdtemp(prefix="bench-floor-")
    cfg = load_config(preset, [*overrides, f"run.run_root={tmp}", "run.run_id=floor", "trainer.eval_interval=0",
                               "trainer.eval_before_train=false", "trainer.ckpt_interval=0",
                               f"trainer.max_training_steps={args.steps}", f"trainer.num_threads={args.threads}"])
    threads = set_torch_threads(args.threads)
    engine = build(cfg, total_steps=args.steps, in_process=True)
    trainer = engine.trainer
    shapes = Shapes.of(trainer.workers.policy.worker.unwrapped)
    base_precision = trainer.workers.policy.worker.base_precision  # the resolved setting, "fp32" without LoRA
    t = cfg.trainer
    rows_per_step, n = t.train_batch_size, cfg.generator.n_samples_per_prompt
    extra_forward = not single_pass(t, rows_per_step * n, n)

    kept: list[Any] = []
    generate_step = trainer.generate_step

    def keep(step: int) -> Any:
        out = generate_step(step)
        kept.append(out)
        return out

    trainer.generate_step = keep
    steps = []
    for step in range(1, args.steps + 1):
        started = time.perf_counter()
        metrics = trainer.train_one_step(step)
        out = kept[-1]
        samples = out.samples
        prompt_lens = samples.prompt_mask_BP.sum(-1).tolist()
        response_lens = samples.response_mask_BT.sum(-1).tolist()
        distinct = {tuple(ids[mask.bool()].tolist()) for ids, mask in zip(samples.prompt_ids_BP, samples.prompt_mask_BP,
                                                                           strict=True)}
        steps.append({"step": step, "wall_s": round(time.perf_counter() - started, 3),
                      "generate_s": metrics["timing/generate"], "policy_train_s": metrics["timing/policy_train"],
                      "sync_weights_s": metrics.get("timing/sync_weights", 0.0), "prompt_lens": prompt_lens,
                      "distinct_prompt_lens": [len(d) for d in distinct], "response_lens": response_lens})
        print(f"step {step}: generate {metrics['timing/generate']:.2f} s, policy_train "
              f"{metrics['timing/policy_train']:.2f} s ({len(response_lens)} samples, "
              f"{sum(response_lens)} response tokens)", flush=True)
    engine.shutdown()

    longest = max(max(s["prompt_lens"]) + max(s["response_lens"]) for s in steps)
    machine = Machine.measure(shapes.hidden, shapes.intermediate, tokens=rows_per_step * n * longest, rows=rows_per_step * n)
    counted = steps[2:] if len(steps) > 2 else steps
    for s in steps:
        s["floor"] = {k: round(v, 4) for k, v in {
            **generate_floor(shapes, machine, s["prompt_lens"], s["distinct_prompt_lens"], s["response_lens"]),
            **train_floor(shapes, machine, s["prompt_lens"], s["distinct_prompt_lens"], s["response_lens"],
                          extra_forward, t.share_prompt_prefix, base_precision == "bf16")}.items()}
    ratios = {phase: round(statistics.median(s[f"{phase}_s"] / s["floor"][phase] for s in counted), 2)
              for phase in ("generate", "policy_train")}
    arm_name = "full" if args.full else ("lora" if shapes.lora else "full")
    result = {
        "bench": "floor", "model": args.model, "arm": arm_name, "preset": preset, "overrides": overrides,
        "machine": asdict(machine), "cpu": platform.processor() or platform.machine(), "shapes": asdict(shapes),
        "extra_forward": extra_forward, "base_precision": base_precision, "steps_counted": [s["step"] for s in counted],
        "ratio_to_floor": ratios,
        "median_s": {p: round(statistics.median(s[f"{p}_s"] for s in counted), 3) for p in ("generate", "policy_train")},
        "median_floor_s": {p: round(statistics.median(s["floor"][p] for s in counted), 3)
                           for p in ("prefill", "decode", "generate", "forward", "backward", "optimizer",
                                     "old_logprobs", "policy_train")},
        "goals": GOALS if args.model == "smollm2" and arm_name == "lora" else None,
        "load_avg_1m": os.getloadavg()[0], "threads": threads, "steps": steps,
    }
    suffix = f"_{args.base_precision}" if args.base_precision else ""
    path = args.out or str(RESULTS / f"floor_{args.model}_{arm_name}{suffix}.json")
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    print(json.dumps({k: result[k] for k in ("model", "arm", "base_precision", "machine", "ratio_to_floor", "median_s",
                                             "median_floor_s", "load_avg_1m")}))
    return 0
