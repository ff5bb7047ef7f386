"""GPU check: the engine's torch path (sampler + policy loss) in bf16 on CUDA, as one JSON line.

Self-contained for a CUDA machine with torch and transformers but maybe no vLLM and no network:
builds a randomly initialised Qwen2 of ~300 M parameters (no download), then times

- generation: ``skyrl_engine.sampler.sample`` (KV cache), ``batch`` prompts × ``gen_len`` tokens;
- training: ``skyrl_engine.policy.response_logprobs`` + the registered ``regular`` PPO loss +
  backward + AdamW, micro-batched, on the sampled sequences;
- weight sync: copying the policy's state dict into the sampling model (what the torch backend does);

and prints ``{"generate_tokens_per_s", "train_tokens_per_s", "step_s", ...}``.

``--scale-out`` instead runs ``bench/scale_out.py``'s comparison on the GPUs: the engine's quickstart on
its two models (tiny, ~10M parameters) with 1 policy rank and with N = every visible GPU (FSDP2, NCCL),
colocated with the generator as SkyRL runs on GPUs, one arm after the other; step time, tokens/s and
per-rank resident bytes side by side. It needs the repository's engine and at least 2 GPUs (with fewer
it says so and exits 0).

    python bench/gpu_check.py                        # CUDA, bf16, ~300 M params
    python bench/gpu_check.py --device cpu --tiny    # a seconds-long smoke run anywhere
    python bench/gpu_check.py --out gpu_check.json
    python bench/gpu_check.py --scale-out --out gpu_scale_out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "backend"))

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
    from skyrl_engine.policy import TrainBatch, response_logprobs
    from skyrl_engine.sampler import SamplingParams, sample

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
    """``bench/scale_out.py``'s 1-vs-N policy ranks comparison with N = the visible GPUs; the JSON-able report
    (``{"skipped": why}`` with fewer than 2 GPUs)."""
    import tempfile

    import torch

    gpus = torch.cuda.device_count()
    if gpus < 2:
        return {"skipped": f"the 1-vs-N comparison needs at least 2 CUDA devices; {gpus} visible"}
    import ray

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from scale_out import base_config, bench_models, compare_ranks

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
    args = parser.parse_args(argv)
    small = args.tiny
    args.dtype = args.dtype or ("bf16" if args.device.startswith("cuda") else "fp32")
    args.batch = args.batch or (8 if small else 64)
    args.prompt_len = args.prompt_len or (16 if small else 128)
    args.gen_len = args.gen_len or (16 if small else 256)
    args.micro = args.micro or (8 if small else 16)
    report = scale_out(args) if args.scale_out else run(args)
    text = json.dumps(report)
    print(text)
    if args.out:
        os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
