"""Tokenizer and model round trips, the tiny model cache, and the sampler against a forward pass."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
from types import SimpleNamespace

import pytest
import torch

from skyrl_engine.models import (
    TinyModelSpec,
    build_char_tokenizer,
    build_tiny_model,
    encode_prompt,
    load_model,
    load_tokenizer,
    tiny_model_dir,
)
from skyrl_engine.policy import response_logprobs
from skyrl_engine.sampler import SamplingParams, sample
from skyrl_engine.tasks import load_prompts
from skyrl_engine.types import TrainBatch


def test_tokenizer_round_trip_and_chat_template(tmp_path):
    tok = build_char_tokenizer()
    text = "12+7 = 19\nok!"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text) and tok.decode(ids) == text
    prompt = encode_prompt(tok, [{"role": "user", "content": "1+2"}])
    assert tok.decode(prompt) == "<|user|>1+2<|im_end|><|assistant|>"
    tok.save_pretrained(tmp_path)
    again = load_tokenizer(str(tmp_path))
    assert again.encode(text, add_special_tokens=False) == ids
    assert encode_prompt(again, [{"role": "user", "content": "1+2"}]) == prompt
    assert again.eos_token == "<|im_end|>" and again.pad_token_id == tok.pad_token_id


def test_model_round_trip(tiny_model_dir, tmp_path):
    model = load_model(tiny_model_dir)
    model.save_pretrained(tmp_path)
    again = load_model(str(tmp_path))
    x = torch.randint(0, 90, (2, 7))
    with torch.no_grad():
        assert torch.equal(model(input_ids=x).logits, again(input_ids=x).logits)


def _build(args):
    cache, seed = args
    os.environ["SKYRL_NB_CACHE"] = cache
    torch.set_num_threads(1)
    rows = load_prompts(["builtin://arithmetic/test"])[:64]
    return build_tiny_model(rows, seed, TinyModelSpec(hidden_size=32, intermediate_size=64, sft_steps=3, sft_batch_size=8))


def test_tiny_model_cache_survives_concurrent_builds(tmp_path, monkeypatch):
    cache = str(tmp_path / "cache")
    monkeypatch.setenv("SKYRL_NB_CACHE", cache)  # _build in this process sets it too: restored after the test
    with mp.get_context("spawn").Pool(2) as pool:
        a, b = pool.map(_build, [(cache, 7), (cache, 7)])
    assert a == b and os.path.exists(os.path.join(a, "model.safetensors"))
    assert not [n for n in os.listdir(os.path.dirname(a)) if n.startswith(".build-")]
    info = json.load(open(os.path.join(a, "warm_start.json")))
    assert len(info["sft_losses"]) == 3
    mtime = os.path.getmtime(os.path.join(a, "model.safetensors"))
    assert _build((cache, 7)) == a and os.path.getmtime(os.path.join(a, "model.safetensors")) == mtime
    rows = load_prompts(["builtin://arithmetic/test"])[:64]
    assert tiny_model_dir(rows, 8) != tiny_model_dir(rows, 7)


def _sampled_batch(samples) -> TrainBatch:
    return TrainBatch(
        sequences_BL=torch.cat([samples.prompt_ids_BP, samples.response_ids_BT], dim=1),
        attention_mask_BL=torch.cat([samples.prompt_mask_BP, samples.response_mask_BT], dim=1),
        response_mask_BT=samples.response_mask_BT,
        advantages_BT=torch.zeros_like(samples.logprobs_BT),
        rollout_logprobs_BT=samples.logprobs_BT,
        group_size=1,
    )


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_generate_length=12, temperature=1.0),
        SamplingParams(max_generate_length=12, temperature=0.7, top_k=20, top_p=0.9, min_p=0.05),
        SamplingParams(max_generate_length=12, temperature=0.0),
    ],
    ids=["t1", "filtered", "greedy"],
)
def test_sampler_logprobs_equal_a_full_forward_pass(tiny_model_dir, params):
    torch.set_num_threads(1)
    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    contents = ["1+2", "a much longer prompt here", "7+0", "x"]
    prompts = [encode_prompt(tok, [{"role": "user", "content": c}]) for c in contents] * 2
    samples = sample(model, prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(1))
    assert samples.response_ids_BT.shape[0] == len(prompts)
    with torch.no_grad():
        logprobs_BT, _ = response_logprobs(model, _sampled_batch(samples), params.temperature or 1.0)
    mask = samples.response_mask_BT.bool()
    assert mask.any()
    assert torch.allclose(logprobs_BT[mask], samples.logprobs_BT[mask], atol=1e-5, rtol=0)
    assert (samples.logprobs_BT[~mask] == 0).all()
    for b, reason in enumerate(samples.finish_reasons):
        n = int(samples.response_mask_BT[b].sum())
        if reason == "stop":
            assert int(samples.response_ids_BT[b, n - 1]) == tok.eos_token_id
        else:
            assert n == params.max_generate_length and tok.eos_token_id not in samples.response_ids_BT[b].tolist()


def test_sampler_is_reproducible_and_stops_at_eos(tiny_model_dir):
    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    prompts = [encode_prompt(tok, [{"role": "user", "content": "3+4"}])] * 16
    params = SamplingParams(max_generate_length=5, temperature=1.0)
    a = sample(model, prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(5))
    b = sample(model, prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(5))
    assert torch.equal(a.response_ids_BT, b.response_ids_BT) and a.finish_reasons == b.finish_reasons
    # a model that always prefers EOS: every row stops after one token
    class AlwaysEos(torch.nn.Module):
        def forward(self, input_ids, **kwargs):
            logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], len(tok))
            logits[..., tok.eos_token_id] = 10.0
            return SimpleNamespace(logits=logits)

    forced = sample(AlwaysEos(), prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(0))
    assert forced.finish_reasons == ["stop"] * 16 and forced.response_mask_BT.sum(-1).tolist() == [1] * 16


def test_a_shared_prefill_samples_what_a_prefill_per_row_samples(tiny_model_dir):
    """A group's rows share one prefill of their prompt (``generator.inference_engine.enable_prefix_caching``):
    the same tokens and log-probs as prefilling every row, repeats in any order, one prompt left-padded."""
    torch.set_num_threads(1)
    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    a, b, c = (encode_prompt(tok, [{"role": "user", "content": q}]) for q in ("1+2", "a much longer prompt", "9+9"))
    prompts = [a, a, b, a, c, b, b, c]
    params = SamplingParams(max_generate_length=10, temperature=1.0)
    got = [sample(model, prompts, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(4),
                  share_prefill=share) for share in (True, False)]
    assert torch.equal(got[0].response_ids_BT, got[1].response_ids_BT)
    assert got[0].finish_reasons == got[1].finish_reasons
    assert torch.allclose(got[0].logprobs_BT, got[1].logprobs_BT, atol=1e-6, rtol=0)
    assert len({tuple(r) for r in got[0].response_ids_BT[:2].tolist()}) == 2  # a group's rows still differ


@pytest.mark.parametrize("adapter", [False, True], ids=["full", "lora"])
def test_a_shared_prompt_pass_trains_as_a_pass_per_row(tiny_model_dir, adapter):
    """``trainer.share_prompt_prefix``: each distinct prompt of a micro-batch goes through the model once and its
    rows' responses attend to its keys and values. Log-probs, and the gradients of a loss on them (which
    flow back into the shared prompt pass), equal the per-row pass's to float rounding, LoRA (PEFT) included."""
    from small_models import with_adapter

    torch.set_num_threads(1)
    tok = load_tokenizer(tiny_model_dir)
    model = load_model(tiny_model_dir)
    if adapter:
        model = with_adapter(model)
    model.train()
    a, b = (encode_prompt(tok, [{"role": "user", "content": q}]) for q in ("12+30", "a longer prompt than that"))
    samples = sample(model, [a, a, a, b, b, b], SamplingParams(max_generate_length=9, temperature=1.0),
                     tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(2))
    batch = _sampled_batch(samples)
    mask = samples.response_mask_BT.float()
    weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)  # a loss that weighs every token apart
    results = []
    for share in (True, False):
        model.zero_grad(set_to_none=True)
        logprobs_BT, entropy_BT = response_logprobs(model, batch, 0.7, with_entropy=True, share_prompt=share,
                                                    entropy_grad=True)
        ((logprobs_BT * weights * mask).sum() + entropy_BT.mul(mask).mean()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        results.append((logprobs_BT.detach(), grads))
    (shared, shared_grads), (full, full_grads) = results
    assert torch.allclose(shared * mask, full * mask, atol=1e-5, rtol=0)
    assert shared_grads.keys() == full_grads.keys() and shared_grads
    if adapter:
        assert all("lora_" in n for n in shared_grads)  # the base is frozen
    else:
        assert any("embed_tokens" in n for n in shared_grads)  # the prompt pass's gradient reached the embedding
    for name, g in full_grads.items():
        assert torch.allclose(shared_grads[name], g, atol=1e-5 * (1 + float(g.abs().max())), rtol=1e-4), name
