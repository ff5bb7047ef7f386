"""GPU check: the engine's torch path (sampler + policy loss) in bf16 on CUDA, as one JSON line.

Self-contained for a CUDA machine with torch and transformers but maybe no vLLM and no network:
builds a randomly initialised Qwen2 of ~300 M parameters (no download), then times

- generation: ``skyrl_engine.sampler.sample`` (KV cache), ``batch`` prompts × ``gen_len`` tokens;
- training: ``skyrl_engine.policy.response_logprobs`` + the registered ``regular`` PPO loss +
  backward + AdamW, micro-batched, on the sampled sequences;
- weight sync: copying the policy's state dict into the sampling model (what the torch backend does);

and prints ``{"generate_tokens_per_s", "train_tokens_per_s", "step_s", ...}``.

``--scale-out`` instead runs ``python -m bench scale_out``'s comparison on the GPUs: the engine's quickstart on
its two models (tiny, ~10M parameters) with 1 policy rank and with N = every visible GPU (FSDP2, NCCL),
colocated with the generator as SkyRL runs on GPUs, one arm after the other; step time, tokens/s and
per-rank resident bytes side by side. It needs the repository's engine and at least 2 GPUs (with fewer
it says so and exits 0).

    .venv/bin/python -m bench gpu_check --device cpu --tiny    # a seconds-long smoke run anywhere
    # on a GPU machine with torch + transformers but no install of this repo, from the repo root:
    PYTHONPATH=backend python -m bench gpu_check                        # CUDA, bf16, ~300 M params
    PYTHONPATH=backend python -m bench gpu_check --out gpu_check.json
    PYTHONPATH=backend python -m bench gpu_check --scale-out --out gpu_scale_out.json
    PYTHONPATH=backend python -m bench gpu_check --skyrl --out gpu_skyrl.json   # a few real SkyRL steps into a run store

``--skyrl`` runs SkyRL's own trainer (``run.engine: skyrl``, through ``python -m skyrl_engine.skyrl_bridge``)
for ``--skyrl-steps`` steps of the quickstart with the built-in tiny model on one GPU (vLLM engine colocated
with the FSDP policy, as SkyRL runs), then reads the run store back: whether metrics, trajectory parts and a
final status reached it. It needs CUDA and SkyRL's GPU packages (``skyrl[fsdp]==0.4.0`` on Python 3.12; 0.3 is kept);
without them it prints why (``{"skipped": ...}``) and exits 0. A SkyRL training step cannot run on a CPU
machine at all: SkyRL's trainer needs CUDA, vLLM and flash-attn.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

SIZES = {
    # ~304 M parameters: 24 layers of hidden 1024 (GQA 16/4 heads), 32 k vocabulary.
    "full": dict(vocab_size=32000, hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                 num_key_value_heads=4, intermediate_size=2816),
    "tiny": dict(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, intermediate_size=128),
}


def build_model(size: str, dtype, device: str, seed: int = 0):
    """A random-init Qwen2 causal LM of the named size on ``device`` in ``dtype``."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**SIZES[size], max_position_embeddings=4096, tie_word_embeddings=False,
                         bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(seed)
    attn = "sdpa" if device.startswith("cuda") else "eager"
    model = Qwen2ForCausalLM._from_config(config, attn_implementation=attn, dtype=dtype)
    return model.to(device=device, dtype=dtype)


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run(args: argparse.Namespace) -> dict:
    """Time generation, training and weight sync; return the JSON-able report."""
    import torch

    from skyrl_engine import algorithms
    from skyrl_engine.policy import response_logprobs
    from skyrl_engine.sampler import SamplingParams, sample
    from skyrl_engine.types import TrainBatch

    device = args.device
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(json.dumps({"error": "no CUDA device visible; use --device cpu --tiny to smoke-test"}))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32, "fp16": torch.float16}[args.dtype]
    if args.threads:
        torch.set_num_threads(args.threads)
    size = "tiny" if args.tiny else "full"
    torch.set_default_device(device)  # the engine's sampler builds its tensors with factory defaults

    policy = build_model(size, dtype, device, seed=0)
    sampler_model = build_model(size, dtype, device, seed=0)
    sampler_model.requires_grad_(False).eval()
    n_params = sum(p.numel() for p in policy.parameters())
    optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-6)
    vocab = SIZES[size]["vocab_size"]
    gen = torch.Generator(device=device).manual_seed(0)
    params = SamplingParams(max_generate_length=args.gen_len, temperature=1.0)

    def one_step() -> dict[str, float]:
        prompts = torch.randint(1, vocab, (args.batch, args.prompt_len), generator=gen).tolist()
        _sync(device)
        t0 = time.perf_counter()
        # eos_id -1 never matches: every row generates exactly gen_len tokens (pure throughput)
        s = sample(sampler_model, prompts, params, eos_id=-1, pad_id=0, generator=gen)
        _sync(device)
        t1 = time.perf_counter()
        batch = TrainBatch(
            sequences_BL=torch.cat([s.prompt_ids_BP, s.response_ids_BT], dim=1),
            attention_mask_BL=torch.cat([s.prompt_mask_BP, s.response_mask_BT], dim=1),
            response_mask_BT=s.response_mask_BT,
            advantages_BT=torch.randn(s.response_ids_BT.shape, generator=gen),
            rollout_logprobs_BT=s.logprobs_BT,
            group_size=1,
        )
        B = batch.sequences_BL.shape[0]
        num_tokens = float(batch.response_mask_BT.sum())
        optimizer.zero_grad(set_to_none=True)
        for lo in range(0, B, args.micro):
            micro = batch.rows(lo, lo + args.micro)
            mask = micro.response_mask_BT.float()
            logprobs, _ = response_logprobs(policy, micro, temperature=1.0)
            loss, _ = algorithms.compute_policy_loss(
                "regular", logprobs, micro.rollout_logprobs_BT, micro.advantages_BT, mask,
                None, num_sequences=B, num_tokens=num_tokens,
            )
            loss.backward()
        torch.nn.utils.clip_grad_norm_(policy.parameters(), 1.0)
        optimizer.step()
        _sync(device)
        t2 = time.perf_counter()
        with torch.no_grad():
            for dst, src in zip(sampler_model.parameters(), policy.parameters(), strict=True):
                dst.copy_(src)
        _sync(device)
        t3 = time.perf_counter()
        return {
            "generate_s": t1 - t0,
            "train_s": t2 - t1,
            "sync_s": t3 - t2,
            "gen_tokens": float(s.response_mask_BT.sum()),
            "train_tokens": float(batch.attention_mask_BL.sum()),
        }

    one_step()  # warm-up: kernels, allocator, cache shapes
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    steps = [one_step() for _ in range(args.steps)]
    total = {k: sum(s[k] for s in steps) for k in steps[0]}
    report = {
        "device": device,
        "device_name": torch.cuda.get_device_name(0) if device.startswith("cuda") else "cpu",
        "torch": torch.__version__,
        "dtype": args.dtype,
        "model": f"random Qwen2 ({size})",
        "params_m": round(n_params / 1e6, 1),
        "batch": args.batch,
        "prompt_len": args.prompt_len,
        "gen_len": args.gen_len,
        "micro_batch": args.micro,
        "steps_timed": args.steps,
        "generate_tokens_per_s": round(total["gen_tokens"] / total["generate_s"], 1),
        "train_tokens_per_s": round(total["train_tokens"] / total["train_s"], 1),
        "step_s": round((total["generate_s"] + total["train_s"] + total["sync_s"]) / args.steps, 4),
        "generate_s": round(total["generate_s"] / args.steps, 4),
        "train_s": round(total["train_s"] / args.steps, 4),
        "sync_weights_s": round(total["sync_s"] / args.steps, 4),
    }
    if device.startswith("cuda"):
        report["peak_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return report


def scale_out(args: argparse.Namespace) -> dict:
    """``python -m bench scale_out``'s 1-vs-N policy ranks comparison with N = the visible GPUs; the JSON-able report
    (``{"skipped": why}`` with fewer than 2 GPUs)."""
    import tempfile

    import torch

    gpus = torch.cuda.device_count()
    if gpus < 2:
        return {"skipped": f"the 1-vs-N comparison needs at least 2 CUDA devices; {gpus} visible"}
    import ray

    from bench.scale_out import base_config, bench_models, compare_ranks

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(address="local", num_cpus=os.cpu_count(), num_gpus=gpus, include_dashboard=False,
             configure_logging=False, log_to_driver=False)
    try:
        tmp = tempfile.mkdtemp(prefix="gpu-scale-out-")
        # colocated, as SkyRL runs on GPUs: n policy ranks share n GPUs with n engine slots (the torch
        # generator sits on the first); both arms at once would need n + 1 GPUs, so they run in turn
        base = base_config(tmp, args.scale_out_steps, args.threads, ["trainer.placement.colocate_all=true"])
        models, train = bench_models(base, tmp)
        report = compare_ranks(base, models, train, (1, gpus), args.scale_out_steps, interleave=False,
                               arm_overrides=lambda n: [f"trainer.placement.policy_num_gpus_per_node={n}",
                                                        f"generator.inference_engine.num_engines={n}"])
    finally:
        ray.shutdown()
    return {"device_name": torch.cuda.get_device_name(0), "gpus": gpus, "torch": torch.__version__,
            "steps": args.scale_out_steps, "models": report}


def skyrl_missing() -> str | None:
    """Why a real SkyRL step cannot run here (no CUDA device, SkyRL's trainer not importable), or None."""
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA device visible: SkyRL's trainer runs on GPUs only (vLLM engines, FSDP workers, flash-attn)"
    from skyrl_engine.skyrl_bridge import probe

    report = probe()
    if report["error"]:
        return f"SkyRL's trainer does not import in this Python ({report['python']}): {report['error']}"
    return None


def skyrl_steps(args: argparse.Namespace) -> tuple[dict, int]:
    """A few real SkyRL steps through the bridge; ``(report, exit code)``: 0 when metrics reached the run store
    (or the check was skipped, the report saying why), 1 when the run left none there."""
    import subprocess
    import tempfile

    why = skyrl_missing()
    if why:
        return {"skipped": why}, 0
    from skyrl_core.config import check_config
    from skyrl_core.runs import RunReader

    root = tempfile.mkdtemp(prefix="gpu-skyrl-")
    steps = args.skyrl_steps
    cfg = check_config("quickstart", [
        f"run.run_root={root}", "run.run_id=skyrl-check", "run.engine=skyrl", f"trainer.max_training_steps={steps}",
        "trainer.train_batch_size=8", "trainer.policy_mini_batch_size=8", "trainer.critic_mini_batch_size=8",
        "trainer.micro_train_batch_size_per_gpu=16", "generator.n_samples_per_prompt=4", "trainer.eval_interval=-1",
        f"trainer.ckpt_interval={steps}", "generator.inference_engine.gpu_memory_utilization=0.4"])
    command = cfg.to_skyrl().command(sys.executable)
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, timeout=args.skyrl_timeout,
                          env={**os.environ, "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE", "disabled")})
    reader = RunReader(cfg.run_dir)
    metrics = reader.metrics()
    report = {
        "device_name": __import__("torch").cuda.get_device_name(0),
        "command_words": len(command), "exit_code": done.returncode, "wall_s": round(time.perf_counter() - started, 1),
        "status": {k: reader.status().get(k) for k in ("state", "step", "total_steps", "error")},
        "metric_steps": [row["step"] for row in metrics],
        "metrics_reached_run_store": bool(metrics),
        "reward": [row.get("reward/avg_raw_reward") for row in metrics],
        "trajectory_steps": reader.trajectory_steps(),
        "events": [e.get("kind") for e in reader.events()],
        "run_dir": str(cfg.run_dir),
    }
    if done.returncode != 0 or not metrics:
        report["output_tail"] = (done.stdout + done.stderr)[-4000:]
    return report, 0 if metrics else 1


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run, print (and optionally write) the JSON report."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--dtype", default=None, choices=["bf16", "fp32", "fp16"], help="bf16 on CUDA, fp32 on CPU")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer toy model instead of ~300 M params")
    parser.add_argument("--batch", type=int, default=None, help="sequences per step (64; 8 with --tiny)")
    parser.add_argument("--prompt-len", type=int, default=None, help="prompt tokens (128; 16 with --tiny)")
    parser.add_argument("--gen-len", type=int, default=None, help="generated tokens (256; 16 with --tiny)")
    parser.add_argument("--micro", type=int, default=None, help="micro-batch for the update (16; 8 with --tiny)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps after one warm-up step")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = leave as is)")
    parser.add_argument("--out", default=None, help="also write the JSON here")
    parser.add_argument("--scale-out", action="store_true",
                        help="instead: the engine's policy on 1 vs N GPUs (N = all visible; needs 2 or more)")
    parser.add_argument("--scale-out-steps", type=int, default=6, help="measured steps per arm with --scale-out")
    parser.add_argument("--skyrl", action="store_true",
                        help="instead: a few real SkyRL trainer steps (run.engine=skyrl) into a run store")
    parser.add_argument("--skyrl-steps", type=int, default=3, help="training steps with --skyrl")
    parser.add_argument("--skyrl-timeout", type=float, default=900.0, help="seconds the SkyRL run may take")
    args = parser.parse_args(argv)
    small = args.tiny
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    args.batch = args.batch or (8 if small else 64)
    args.prompt_len = args.prompt_len or (16 if small else 128)
    args.gen_len = args.gen_len or (16 if small else 256)
    args.micro = args.micro or (8 if small else 16)
    code = 0
    if args.skyrl:
        report, code = skyrl_steps(args)
    else:
        report = scale_out(args) if args.scale_out else run(args)
    text = json.dumps(report)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
