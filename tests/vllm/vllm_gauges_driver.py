"""Driver for test_vllm_gauges.py: joins the Ray head at argv[1], starts one vLLM engine actor with a run id (so it
sets its queue and KV-cache gauges), generates one large batch, prints what it generated as one JSON line, then
keeps the engine alive until stdin closes (its gauges stay in Ray's export meanwhile).

    python vllm_gauges_driver.py ADDRESS VLLM_PYTHON MODEL_DIR RUN_ID
"""

from __future__ import annotations

import json
import sys

import ray

from skyrl_core.config import SamplingParams
from skyrl_engine.models import build_char_tokenizer
from skyrl_engine.vllm_engine import VLLMGenerator

PROMPTS, N, TOKENS = 64, 8, 200


def main() -> None:
    address, vllm_python, model_dir, run_id = sys.argv[1:5]
    ray.init(address=address, log_to_driver=False)
    gen = VLLMGenerator(model_dir, python=vllm_python, dtype="float32", num_threads=1, seed=0,
                        metrics_run_id=run_id)
    print(json.dumps({"ready": True, "info": gen.infos[0]}), flush=True)
    tok = build_char_tokenizer()
    prompts = [tok.encode(f"{i}+{i % 7}=") for i in range(PROMPTS)]
    out = gen.generate(prompts, N, SamplingParams(max_generate_length=TOKENS, temperature=1.0), 0, ignore_eos=True)
    print(json.dumps({"generated": sum(len(r) for r in out.response_ids), "sequences": len(out.response_ids),
                      "prompt_tokens": sum(len(p) for p in prompts)}), flush=True)
    sys.stdin.read()
    gen.shutdown()


if __name__ == "__main__":
    main()
