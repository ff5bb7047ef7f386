"""Large weights reordered once for oneDNN (:mod:`skyrl_engine.prepacked`): the products ``F.linear`` gives to float
rounding at any row count, a copy remade whenever its weight changes (in place, or rebound to new storage), small
weights and weights that train left to ``F.linear``; and the sampler decoding through it samples what it samples
without it, before and after a weight sync."""

from __future__ import annotations

import pytest
import torch
from small_models import llama_gqa

from skyrl_engine import prepacked
from skyrl_engine.sampler import SamplingParams, TorchSampler

pytestmark = pytest.mark.skipif(not prepacked.available(), reason="this torch has no oneDNN reordered linear")
F = torch.nn.functional


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.allclose(a, b, atol=1e-4 * (1 + float(b.abs().max())), rtol=1e-5)


def test_it_multiplies_as_linear_does_at_any_row_count_with_or_without_bias():
    torch.manual_seed(0)
    weight, bias = torch.randn(1024, 512) / 20, torch.randn(1024)  # 2**19 elements: the smallest reordered
    assert prepacked.worth_it(weight)
    packs = prepacked.Prepacked()
    for rows in (1, 7, 32, 45):
        x = torch.randn(rows, 1, 512)
        got = packs.linear(x, weight)
        assert got.shape == (rows, 1, 1024) and _close(got, F.linear(x, weight))
        assert _close(packs.linear(x, weight, bias), F.linear(x, weight, bias))
    assert len(packs._packs) == 1  # one reordered copy serves every row count
    assert "1 weights, 2 MiB" in repr(packs)


def test_a_weight_that_changes_is_reordered_again():
    torch.manual_seed(1)
    linear = torch.nn.Linear(512, 1024, bias=False).requires_grad_(False)
    packs, x = prepacked.Prepacked(), torch.randn(5, 512)
    before = packs.module(linear, x)
    with torch.no_grad():
        linear.weight.add_(1.0)  # in place, as a sync's copy_ writes
    assert _close(packs.module(linear, x), linear(x)) and not _close(before, linear(x))
    for _ in range(3):  # rebound to new storage, freed storage free to be reused
        linear.weight.data = torch.randn(1024, 512)
        assert _close(packs.module(linear, x), linear(x))


def test_small_weights_and_weights_that_train_multiply_through_linear():
    small = torch.nn.Linear(128, 384, bias=True).requires_grad_(False)  # the tiny model's largest
    packs, x = prepacked.Prepacked(), torch.randn(9, 128)
    assert torch.equal(packs.module(small, x), small(x)) and packs._packs == {}
    trains = torch.nn.Linear(512, 1024, bias=False)
    assert not prepacked.worth_it(trains.weight)
    y = packs.module(trains, torch.randn(3, 512))
    assert y.requires_grad and packs._packs == {}
    with torch.no_grad():
        assert prepacked.worth_it(trains.weight)


def test_the_sampler_decodes_the_same_through_reordered_weights_before_and_after_a_sync(monkeypatch):
    torch.set_num_threads(1)
    prompts, params = [[5, 6, 7], [8, 9, 10, 11, 12], [20]], SamplingParams(max_generate_length=12, temperature=1.0)

    real = prepacked.Prepacked.packed

    def run(min_elements: int, sync: dict | None) -> tuple:
        monkeypatch.setattr(prepacked, "MIN_ELEMENTS", min_elements)
        sampler, reordered = TorchSampler(llama_gqa(), pad_id=0), []  # reordered: each product through a copy
        monkeypatch.setattr(prepacked.Prepacked, "packed", lambda self, w: reordered.append(w.shape) or real(self, w))
        first = sampler.generate(prompts, n=4, params=params, seed=3, stop_token_ids=[1])
        sampler.update_weights(sync, version=1)
        second = sampler.generate(prompts, n=4, params=params, seed=3, stop_token_ids=[1])
        return first, second, reordered

    other = llama_gqa()
    with torch.no_grad():
        for p in other.parameters():
            p.mul_(1.5)
    sync = {k: v.clone() for k, v in other.state_dict().items()}
    plain = run(1 << 40, sync)
    packed = run(1, sync)  # every weight of the small model reordered
    assert len(packed[2]) > 0 and plain[2] == []
    for got, want in zip(packed[:2], plain[:2], strict=True):
        assert got.response_ids == want.response_ids
        for a, b in zip(got.logprobs, want.logprobs, strict=True):
            assert torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-4, rtol=0)
    assert plain[0].response_ids != plain[1].response_ids  # the sync changed what it samples
