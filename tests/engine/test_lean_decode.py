"""The sampler's decode loop: the lean decoder against transformers' forward, finished rows dropped from the batch,
each row's draw independent of the rest of the batch; and the trainer's micro-batches trimmed to their longest
response."""

from __future__ import annotations

import pytest
import torch
from small_models import llama_gqa

from skyrl_engine import sampler as sampler_module
from skyrl_engine.decode import lean_decoder
from skyrl_engine.models import encode_prompt, load_model, load_tokenizer
from skyrl_engine.sampler import SamplingParams, sample


def _both_paths(model, prompts, params, eos_id, pad_id, monkeypatch):
    got = [sample(model, prompts, params, eos_id, pad_id, torch.Generator().manual_seed(3))]
    with monkeypatch.context() as m:
        m.setattr(sampler_module, "lean_decoder", lambda model: None)  # every step through transformers
        got.append(sample(model, prompts, params, eos_id, pad_id, torch.Generator().manual_seed(3)))
    return got


def test_lean_decoding_samples_what_transformers_forward_samples(tiny_model_dir, monkeypatch):
    """Grouped-query Llama (random weights) and the tiny Qwen2 (biased projections, trained to stop): the same
    tokens, finish reasons and log-probs as decoding every step through transformers, left-padded prompts and rows
    that finish early included."""
    torch.set_num_threads(1)
    llama = llama_gqa()
    assert lean_decoder(llama) is not None
    prompts = [[5, 6, 7], [8, 9, 10, 11, 12, 13, 14], [5, 6, 7], [20]] * 2
    lean, full = _both_paths(llama, prompts, SamplingParams(max_generate_length=10, temperature=1.0), 1, 0,
                             monkeypatch)
    assert torch.equal(lean.response_ids_BT, full.response_ids_BT)
    assert torch.allclose(lean.logprobs_BT, full.logprobs_BT, atol=1e-5, rtol=0)

    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    assert lean_decoder(model) is not None
    prompts = [encode_prompt(tok, [{"role": "user", "content": c}]) for c in ("3+4", "12+30", "a long prompt", "x")] * 4
    lean, full = _both_paths(model, prompts, SamplingParams(max_generate_length=12, temperature=1.0),
                             tok.eos_token_id, tok.pad_token_id, monkeypatch)
    lengths = lean.response_mask_BT.sum(-1)
    assert int(lengths.min()) * 2 <= int(lengths.max())  # rows finished apart: the batch was compacted
    assert torch.equal(lean.response_ids_BT, full.response_ids_BT) and lean.finish_reasons == full.finish_reasons
    assert torch.allclose(lean.logprobs_BT, full.logprobs_BT, atol=1e-5, rtol=0)


def test_a_rows_tokens_do_not_depend_on_the_other_rows(tiny_model_dir):
    """Each row draws from its own uniform at each position, so the rows around it (and when they finish, which
    drops them from the batch) do not change what it samples."""
    torch.set_num_threads(1)
    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    a, b, c = (encode_prompt(tok, [{"role": "user", "content": q}]) for q in ("3+4", "a long prompt", "12+30"))
    params = SamplingParams(max_generate_length=12, temperature=1.0)
    one = sample(model, [a] + [b] * 7, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(9))
    two = sample(model, [a] + [c] * 7, params, tok.eos_token_id, tok.pad_token_id, torch.Generator().manual_seed(9))
    n = int(one.response_mask_BT[0].sum())
    assert n == int(two.response_mask_BT[0].sum())
    assert one.response_ids_BT[0, :n].tolist() == two.response_ids_BT[0, :n].tolist()
    assert one.finish_reasons[0] == two.finish_reasons[0]


@pytest.mark.parametrize("change", [{"model_type": "gpt2"}, {"hidden_act": "gelu"}, {"use_sliding_window": True}])
def test_architectures_it_does_not_run_exactly_decode_through_transformers(change):
    model = llama_gqa()
    for key, value in change.items():
        setattr(model.config, key, value)
    assert lean_decoder(model) is None


def test_a_micro_batch_trimmed_to_its_longest_response_gives_the_same_log_probs(tiny_model_dir):
    """The trainer drops the response columns no row of a micro-batch uses (``TrainBatch.trimmed``): the prompt width
    stays, and every response token's log-prob is the untrimmed pass's."""
    from skyrl_engine.policy import response_logprobs
    from skyrl_engine.types import TrainBatch

    torch.set_num_threads(1)
    model, tok = load_model(tiny_model_dir), load_tokenizer(tiny_model_dir)
    a, b = (encode_prompt(tok, [{"role": "user", "content": q}]) for q in ("3+4", "a long prompt"))
    samples = sample(model, [a, a, b, b], SamplingParams(max_generate_length=12, temperature=1.0), tok.eos_token_id,
                     tok.pad_token_id, torch.Generator().manual_seed(9))
    # as if a longer row elsewhere in the batch had widened it: 5 columns of padding no row here uses
    pad = torch.zeros(4, 5, dtype=torch.long)
    batch = TrainBatch(
        sequences_BL=torch.cat([samples.prompt_ids_BP, samples.response_ids_BT, pad + tok.pad_token_id], dim=1),
        attention_mask_BL=torch.cat([samples.prompt_mask_BP, samples.response_mask_BT, pad], dim=1),
        response_mask_BT=torch.cat([samples.response_mask_BT, pad], dim=1),
        advantages_BT=torch.zeros(4, samples.response_ids_BT.shape[1] + 5),
        rollout_logprobs_BT=torch.cat([samples.logprobs_BT, pad.float()], dim=1), group_size=2)
    trimmed = batch.trimmed()
    longest = int(samples.response_mask_BT.sum(-1).max())
    assert trimmed.response_mask_BT.shape[1] == longest and trimmed.num_prompt_tokens == batch.num_prompt_tokens
    assert trimmed.trimmed() is trimmed
    with torch.no_grad():
        full, _ = response_logprobs(model, batch, 1.0)
        short, _ = response_logprobs(model, trimmed, 1.0)
    mask = trimmed.response_mask_BT.bool()
    assert torch.allclose(full[:, :longest][mask], short[mask], atol=1e-6, rtol=0)
