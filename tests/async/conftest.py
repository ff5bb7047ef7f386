"""Fixtures for the placement and async tests (their Ray cluster is the session's `engine_ray`)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def tiny_policy_dir(tmp_path_factory) -> str:
    """An untrained tiny Qwen2 (hidden 64) with the engine's char tokenizer, as a local HF directory."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from skyrl_engine.models import build_char_tokenizer

    tokenizer = build_char_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=128, max_position_embeddings=256, tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, bos_token_id=None,
    )
    torch.manual_seed(0)
    path = str(tmp_path_factory.mktemp("tiny-policy"))
    Qwen2ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
