"""The output layer fused with the log-softmax (:mod:`skyrl_engine.head`) against the plain path it replaces: frozen
(LoRA) and trained (full fine-tuning, its weight tied to the embeddings), the same log-probs, entropies and gradients to
float rounding, over several chunks of positions each swept in several blocks of words, with and without a temperature;
and the cases it leaves to the plain path (a trained head whose logits fit one block, an entropy with a gradient, a model
under DDP)."""

from __future__ import annotations

import pytest
import torch
from small_models import llama_gqa, with_adapter
from test_packed import _batch

from skyrl_engine import head, policy


def _pass(model, batch, temperature: float, fused: bool, monkeypatch, block_bytes: int, kind: str = "frozen"):
    with monkeypatch.context() as m:
        m.setattr(head, "BLOCK_BYTES", block_bytes)
        if block_bytes < head.BLOCK_BYTES:  # chunks of 7 positions, each over blocks of 41 words (97 = 41 + 41 + 15)
            m.setattr(head, "BLOCK_ROWS", 7)
        if not fused:
            m.setattr(policy, f"{kind}_head", lambda *a: None)
        calls = []
        real = getattr(policy, f"{kind}_head_logprobs")
        m.setattr(policy, f"{kind}_head_logprobs", lambda *a: calls.append(1) or real(*a))
        model.zero_grad(set_to_none=True)
        mask = batch.response_mask_BT.float()
        weights = torch.linspace(-1.0, 2.0, mask.numel()).reshape(mask.shape)
        logprobs_BT, entropy_BT = policy.response_logprobs(model, batch, temperature, with_entropy=True)
        (logprobs_BT * weights * mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
        assert bool(calls) == fused
        return logprobs_BT.detach(), entropy_BT, grads


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("block_bytes", [head.BLOCK_BYTES, 7 * 4 * 41], ids=["one-block", "small-blocks"])
def test_the_fused_head_computes_what_the_plain_path_computes(temperature, block_bytes, monkeypatch):
    torch.set_num_threads(1)
    model = with_adapter(llama_gqa())
    model.train()
    batch = _batch()
    got_lp, got_ent, got_grads = _pass(model, batch, temperature, True, monkeypatch, block_bytes)
    want_lp, want_ent, want_grads = _pass(model, batch, temperature, False, monkeypatch, block_bytes)
    mask = batch.response_mask_BT.bool()
    assert torch.allclose(got_lp[mask], want_lp[mask], atol=1e-5, rtol=0)
    assert torch.allclose(got_ent[mask], want_ent[mask], atol=1e-5, rtol=0)
    assert bool((got_lp[~mask] == 0).all()) and bool((got_ent[~mask] == 0).all())
    assert not got_ent.requires_grad
    assert got_grads.keys() == want_grads.keys() and got_grads and all("lora_" in n for n in got_grads)
    for name, g in want_grads.items():
        assert float(g.abs().max()) > 0, name
        assert torch.allclose(got_grads[name], g, atol=1e-5 * (1 + float(g.abs().max())), rtol=1e-4), name
    assert type(model.get_base_model().lm_head) is torch.nn.Linear  # put back after the forward


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_fused_trained_head_computes_what_the_plain_path_computes(temperature, monkeypatch):
    torch.set_num_threads(1)
    model = llama_gqa()  # tied embeddings: the output layer's weight is the embedding's, and it trains
    model.train()
    batch = _batch()
    small = 7 * 4 * 41
    got_lp, got_ent, got_grads = _pass(model, batch, temperature, True, monkeypatch, small, kind="trained")
    want_lp, want_ent, want_grads = _pass(model, batch, temperature, False, monkeypatch, small, kind="trained")
    mask = batch.response_mask_BT.bool()
    assert torch.allclose(got_lp[mask], want_lp[mask], atol=1e-5, rtol=0)
    assert torch.allclose(got_ent[mask], want_ent[mask], atol=1e-5, rtol=0)
    assert not got_ent.requires_grad
    assert got_grads.keys() == want_grads.keys() and "model.embed_tokens.weight" in got_grads
    assert len(got_grads) == len(list(model.parameters()))
    for name, g in want_grads.items():
        assert float(g.abs().max()) > 0, name
        assert torch.allclose(got_grads[name], g, atol=1e-5 * (1 + float(g.abs().max())), rtol=1e-4), name


def test_a_trained_head_whose_logits_fit_one_block_or_under_ddp_takes_the_plain_path(monkeypatch):
    model = llama_gqa()
    batch = _batch()
    positions = int(batch.attention_mask_BL[:, batch.num_prompt_tokens:].sum())
    assert head.trained_head(model, positions) is None  # 97 words: one block
    monkeypatch.setattr(head, "BLOCK_BYTES", 97 * 4 * 3)
    assert head.trained_head(model, positions) is model.lm_head
    assert head.trained_head(model, 3) is None
    assert head.trained_head(with_adapter(llama_gqa()).get_base_model(), positions) is None  # frozen: the other path
    calls = []
    monkeypatch.setattr(policy, "trained_head_logprobs", lambda *a: calls.append(a))
    ddp = torch.nn.parallel.DistributedDataParallel.__new__(torch.nn.parallel.DistributedDataParallel)
    torch.nn.Module.__init__(ddp)
    ddp.module = model
    ddp.forward = lambda *a, **k: model(*a, **k)
    logprobs_BT, _ = policy.response_logprobs(ddp, batch, 1.0)
    assert calls == [] and logprobs_BT.requires_grad


def test_without_grad_it_keeps_nothing_for_a_backward(monkeypatch):
    model = with_adapter(llama_gqa())
    batch = _batch()
    with torch.no_grad():
        got, _ = policy.response_logprobs(model, batch, 0.7)
    monkeypatch.setattr(policy, "frozen_head", lambda model: None)
    with torch.no_grad():
        want, _ = policy.response_logprobs(model, batch, 0.7)
    assert not got.requires_grad and torch.allclose(got, want, atol=1e-5, rtol=0)
    hidden = torch.randn(5, 48)
    _, _, _, grad = head._forward(hidden, torch.randn(97, 48), torch.tensor([0, 1, 2, 3, 96]), 0.7, want_grad=False)
    assert grad is None


def test_a_head_that_trains_or_an_entropy_with_a_gradient_takes_the_plain_path(monkeypatch):
    full = llama_gqa()  # tied embeddings: the output layer's weight trains
    assert head.frozen_head(full) is None
    adapted = with_adapter(llama_gqa())
    assert head.frozen_head(adapted.get_base_model()) is adapted.get_base_model().lm_head
    with_bias = llama_gqa()
    with_bias.lm_head = torch.nn.Linear(48, 97, bias=True).requires_grad_(False)
    assert head.frozen_head(with_bias) is None

    calls = []
    monkeypatch.setattr(policy, "frozen_head_logprobs", lambda *a: calls.append(a))
    batch = _batch()
    policy.response_logprobs(full, batch, 1.0, with_entropy=True)
    _, entropy_BT = policy.response_logprobs(adapted, batch, 1.0, with_entropy=True, entropy_grad=True)
    assert calls == [] and entropy_BT.requires_grad


def test_the_blocks_cover_every_position_and_word_once() -> None:
    """Chunks of at most BLOCK_ROWS positions, each swept over the vocabulary in blocks of at most BLOCK_BYTES."""
    for rows, vocab in [(1083, 49152), (5000, 49152), (3, 97), (1, 1)]:
        chunks = list(head.blocks(rows, vocab))
        assert [(lo, hi) for lo, hi, _ in chunks] == [(lo, min(lo + head.BLOCK_ROWS, rows))
                                                      for lo in range(0, rows, head.BLOCK_ROWS)]
        for lo, hi, words in chunks:
            assert words[0][0] == 0 and words[-1][1] == vocab
            assert all(b == c for (_, b), (c, _) in zip(words, words[1:], strict=False))
            assert all((hi - lo) * (b - a) * 4 <= head.BLOCK_BYTES for a, b in words)
    assert [b - a for a, b in next(head.blocks(1083, 49152))[2]][:1] == [2904]  # SmolLM2's step: 17 blocks
