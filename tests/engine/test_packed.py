"""The trainer's forward over real tokens only (:mod:`skyrl_engine.packed`) against the padded pass it replaces for
Llama-family models: the same log-probs, entropies and gradients to float rounding, with left-padded prompts of
different lengths, groups that share their prompt, responses that end early, LoRA adapters; and the cases it leaves
to the padded pass."""

from __future__ import annotations

import pytest
import torch
from small_models import llama_gqa, with_adapter

from skyrl_engine import policy
from skyrl_engine.packed import packed_forward
from skyrl_engine.types import TrainBatch


def _batch(pad_id: int = 0) -> TrainBatch:
    """Three prompts (widths 3, 7 and 1, left-padded to 7), each with samples of their own lengths (one of 1 token,
    one filling all 6 columns), in groups: rows 0-2 share a prompt, rows 3-5 another, row 6 is alone."""
    prompts = [[5, 6, 7]] * 3 + [[8, 9, 10, 11, 12, 13, 14]] * 3 + [[20]]
    responses = [[30, 31, 32, 33], [40], [41, 42, 43, 44, 45, 46], [50, 51], [52, 53, 54], [60, 61, 62, 63, 64, 65],
                 [70, 71, 72]]
    P, T = 7, 6
    rows, masks = [], []
    for p, r in zip(prompts, responses, strict=True):
        rows.append([pad_id] * (P - len(p)) + p + r + [pad_id] * (T - len(r)))
        masks.append([0] * (P - len(p)) + [1] * (len(p) + len(r)) + [0] * (T - len(r)))
    mask_BL = torch.tensor(masks)
    response_mask_BT = mask_BL[:, P:].clone()
    return TrainBatch(sequences_BL=torch.tensor(rows), attention_mask_BL=mask_BL, response_mask_BT=response_mask_BT,
                      advantages_BT=torch.zeros(len(rows), T), rollout_logprobs_BT=torch.zeros(len(rows), T),
                      group_size=1)


def _pass(model, batch, share: bool, padded: bool, monkeypatch):
    """Log-probs, entropies and parameter gradients of a loss that weighs every response token apart."""
    with monkeypatch.context() as m:
        if padded:
            m.setattr(policy, "packed_forward", lambda model: None)
        model.zero_grad(set_to_none=True)
        mask = batch.response_mask_BT.float()
        weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)
        logprobs_BT, entropy_BT = policy.response_logprobs(model, batch, 0.7, with_entropy=True, share_prompt=share,
                                                           entropy_grad=True)
        ((logprobs_BT * weights * mask).sum() + (entropy_BT * mask).mean()).backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        return logprobs_BT.detach(), entropy_BT.detach(), grads


@pytest.mark.parametrize("adapter", [False, True], ids=["full", "lora"])
@pytest.mark.parametrize("share", [True, False], ids=["shared-prompt", "per-row"])
@pytest.mark.parametrize("arch", ["llama-gqa", "tiny-qwen2"])
def test_the_packed_pass_computes_what_the_padded_pass_computes(arch, share, adapter, tiny_model_dir, monkeypatch):
    from skyrl_engine.models import load_model

    torch.set_num_threads(1)
    model = llama_gqa() if arch == "llama-gqa" else load_model(tiny_model_dir)
    if adapter:
        model = with_adapter(model)
    model.train()
    batch = _batch()
    packed = packed_forward(model)
    assert packed is not None
    logits_MV, b_M, t_M = packed.logits(batch.sequences_BL, batch.attention_mask_BL, batch.num_prompt_tokens, share)
    assert logits_MV.shape[0] == int(batch.response_mask_BT.sum())  # only the positions the loss reads
    assert torch.stack([b_M, t_M], dim=1).tolist() == batch.response_mask_BT.nonzero().tolist()

    got_lp, got_ent, got_grads = _pass(model, batch, share, padded=False, monkeypatch=monkeypatch)
    want_lp, want_ent, want_grads = _pass(model, batch, share, padded=True, monkeypatch=monkeypatch)
    mask = batch.response_mask_BT.bool()
    assert torch.allclose(got_lp[mask], want_lp[mask], atol=1e-5, rtol=0)
    assert torch.allclose(got_ent[mask], want_ent[mask], atol=1e-5, rtol=0)
    assert bool((got_lp[~mask] == 0).all()) and bool((got_ent[~mask] == 0).all())
    assert got_grads.keys() == want_grads.keys() and got_grads
    if adapter:
        assert all("lora_" in n for n in got_grads)
    else:
        assert any("embed_tokens" in n for n in got_grads)  # the prompt tokens' gradient reached the embedding
    for name, g in want_grads.items():
        assert torch.allclose(got_grads[name], g, atol=1e-5 * (1 + float(g.abs().max())), rtol=1e-4), name


@pytest.mark.parametrize("mutation", ["response-position+1", "another-groups-prompt"])
def test_a_wrong_layout_is_caught(mutation, monkeypatch):
    """The comparison above can fail: the packed pass with its responses one position further from their prompts, or
    attending to another group's prompt, gives other log-probs than the padded pass."""
    from skyrl_engine import packed as packed_module

    model = llama_gqa().train()
    batch = _batch()
    P = batch.num_prompt_tokens
    if mutation == "response-position+1":
        real = packed_module.position_ids_from_mask
        monkeypatch.setattr(packed_module, "position_ids_from_mask",
                            lambda mask: real(mask) + (torch.arange(mask.shape[1]) >= P))
    else:
        real = packed_module.distinct_rows
        monkeypatch.setattr(packed_module, "distinct_rows", lambda rows: (lambda f, i: (f, (i + 1) % len(f)))(*real(rows)))
    got, _, _ = _pass(model, batch, True, padded=False, monkeypatch=monkeypatch)
    monkeypatch.undo()
    want, _, _ = _pass(model, batch, True, padded=True, monkeypatch=monkeypatch)
    mask = batch.response_mask_BT.bool()
    assert not torch.allclose(got[mask], want[mask], atol=1e-3, rtol=0)


def test_masks_it_does_not_know_take_the_padded_pass(monkeypatch):
    """A response with a hole in its attention mask (not the sampler's layout): the packed pass declines and
    response_logprobs gives the padded pass's values; other architectures decline too. (Models wrapped for several
    ranks take the packed pass: tests/engine/test_data_parallel.py trains FSDP2 ranks against one worker.)"""
    model = llama_gqa().train()
    batch = _batch()
    holed = batch.attention_mask_BL.clone()
    holed[0, batch.num_prompt_tokens + 1] = 0
    batch = TrainBatch(**{**batch.__dict__, "attention_mask_BL": holed})
    assert packed_forward(model).logits(batch.sequences_BL, holed, batch.num_prompt_tokens) is None
    got, _, _ = _pass(model, batch, True, padded=False, monkeypatch=monkeypatch)
    want, _, _ = _pass(model, batch, True, padded=True, monkeypatch=monkeypatch)
    assert torch.equal(got, want)

    gpt2 = llama_gqa()
    gpt2.config.model_type = "gpt2"
    assert packed_forward(gpt2) is None


def test_the_rotary_node_gives_transformers_values_and_gradients_bit_for_bit(monkeypatch):
    from skyrl_engine import packed as packed_mod
    from skyrl_engine.decode import model_file

    torch.set_num_threads(1)
    model = llama_gqa().train()
    own_file = model_file(model.model.layers[0].self_attn)
    own = own_file.apply_rotary_pos_emb
    rotate_qk, seen = packed_mod.rotate_qk, []
    monkeypatch.setattr(packed_mod, "rotate_qk", lambda *args: seen.append(args) or rotate_qk(*args))
    runs = {}
    for name, same in (("node", True), ("transformers", False)):
        with monkeypatch.context() as m:
            m.setattr(packed_mod, "_same_rotary", lambda apply, same=same: same)
            runs[name] = _pass(model, _batch(), share=True, padded=False, monkeypatch=monkeypatch)
        assert own_file.apply_rotary_pos_emb is own  # the model file's own again after the call
    assert seen  # the packed pass went through the node
    (lp, ent, grads), (want_lp, want_ent, want_grads) = runs["node"], runs["transformers"]
    assert torch.equal(lp, want_lp) and torch.equal(ent, want_ent)
    assert grads.keys() == want_grads.keys() and all(torch.equal(grads[n], g) for n, g in want_grads.items())
