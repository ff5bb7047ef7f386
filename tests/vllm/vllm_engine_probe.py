"""Run under the vLLM python (not pytest): VLLMEngine in-process, no Ray.

    <vllm python> tests/vllm/vllm_engine_probe.py MODEL_A MODEL_B OUT.json

Samples with model A, reloads model B's weights (``reload_weights`` from its safetensors), samples
again, and writes the engine's log-probs next to a plain float32 Hugging Face forward pass of the same
weights, plus timings, as JSON for the test to check.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "backend"))


def hf_logprobs(model_dir: str, prompts, responses, temperature: float) -> list[list[float]]:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    out = []
    with torch.no_grad():
        for prompt, response in zip(prompts, responses, strict=True):
            ids = torch.tensor([list(prompt) + list(response)])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist())
    return out


def main() -> None:
    model_a, model_b, out_path = sys.argv[1:4]
    import tempfile

    from skyrl_engine.vllm_engine import VLLMEngine, prepare_model_dir_for_vllm

    staged = tempfile.mkdtemp(prefix="skyrl-vllm-probe-")

    prompts = [[5, 6, 7, 8], [9, 10], [11, 12, 13], [14]]
    sampling = {"max_generate_length": 12, "temperature": 0.8, "stop_token_ids": [1]}
    t0 = time.perf_counter()
    engine = VLLMEngine(str(prepare_model_dir_for_vllm(model_a, staged)), dtype="float32", num_threads=1)
    start_s = time.perf_counter() - t0
    first = engine.generate(prompts, 4, sampling)
    prompts_b = [prompts[i] for i in first["prompt_index"]]
    first["hf"] = hf_logprobs(model_a, prompts_b, first["response_ids"], 0.8)
    reload_s = engine.reload_weights(str(prepare_model_dir_for_vllm(model_b, staged)), version=1)
    second = engine.generate(prompts, 4, sampling)
    prompts_b = [prompts[i] for i in second["prompt_index"]]
    second["hf"] = hf_logprobs(model_b, prompts_b, second["response_ids"], 0.8)
    second["hf_old"] = hf_logprobs(model_a, prompts_b, second["response_ids"], 0.8)
    report = {"info": engine.info(), "start_s": start_s, "reload_s": reload_s, "first": first, "second": second}
    Path(out_path).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
