"""Models the engine tests build in a moment: a random grouped-query Llama, and any model with a LoRA adapter that
takes part from the start."""

from __future__ import annotations

import torch


def llama_gqa():
    """A random Llama with grouped-query attention, SmolLM2's layout in miniature (3 query heads per K/V head)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=97, hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=128,
                         tie_word_embeddings=True, attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


def with_adapter(model, rank: int = 4):
    """``model`` wrapped with a rank-``rank`` LoRA adapter (the quickstart's LoRA settings), its ``B`` halves moved off
    zero so the adapter changes the outputs."""
    from skyrl_core.config import load_config
    from skyrl_engine import lora

    model = lora.wrap(model, load_config("quickstart", [f"trainer.policy.model.lora.rank={rank}"]).trainer.policy.model.lora, 0)
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05, generator=torch.Generator().manual_seed(1))
    return model
