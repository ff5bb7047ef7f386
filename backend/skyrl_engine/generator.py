"""The generator: prompts → n sampled completions each → environment rewards.

``GeneratorWorker`` is the Ray generator actor (and runs in-process in the bench and tests). It
owns a copy of the policy for sampling; the trainer pushes new weights after every step.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from skyrl_engine.sampler import SampleBatch, SamplingParams
    from skyrl_engine.tasks import PromptRow


@dataclass
class GeneratorOutput:
    """One step's rollouts: ``len(rows) * n`` samples, grouped (sample i belongs to prompt i // n)."""

    samples: SampleBatch
    rewards_B: list[float]
    responses: list[str]
    prompts: list[str]
    """The prompt as the model saw it (chat template applied), one per sample."""
    group_ids_B: list[int]
    env_classes: list[str]
    data_sources: list[str]
    env_metrics: list[dict[str, Any]]
    group_size: int
    # Optional, filled by the multi-turn loop (multiturn.py) and the DAPO wrapper (dapo.py):
    loss_mask_BT: Any = None
    """Response tokens that carry loss (None: the response mask): masks env turns and filtered samples."""
    sample_columns: list[dict[str, Any]] | None = None
    """Extra run-store columns per sample (``turns``, ``discarded_reason``), merged into its row."""
    discarded: GeneratorOutput | None = None
    """Samples dropped before training (``sample_columns`` carry ``discarded_reason``); stored, not trained."""
    metrics: dict[str, float] = field(default_factory=dict)
    """Generator-side step metrics (``dynamic_sampling/*``, ``generate/avg_num_turns``, ...)."""


def step_seed(seed: int, step: int, stream: int = 0) -> int:
    """A per-step sampling seed from the run seed: same inputs, same draws, in any process.

    ``stream`` separates training rollouts (0) from evaluation (1).
    """
    return (seed * 1_000_003 + step * 9_176 + stream * 7_919_777) % (2**63 - 1)


class GeneratorWorker:
    """Samples with the torch sampler and scores with skyrl-gym environments."""

    def __init__(self, model_path: str, num_threads: int = 0, env_class: str = "gsm8k"):
        import torch

        from skyrl_engine.models import load_model, load_tokenizer
        from skyrl_engine.policy import set_torch_threads
        from skyrl_engine.tasks import register_builtin_envs

        self.num_threads = set_torch_threads(num_threads)
        torch.use_deterministic_algorithms(True, warn_only=True)
        self.tokenizer = load_tokenizer(model_path)
        self.model = load_model(model_path)
        self.model.requires_grad_(False)
        self.default_env_class = env_class
        self._prompt_cache: dict[str, list[int]] = {}
        register_builtin_envs()

    def load_weights(self, state_dict: dict[str, Any]) -> None:
        """Replace the sampling model's weights (a full state dict from the trainer)."""
        self.model.load_state_dict(state_dict, strict=True)

    def _encode(self, row: PromptRow) -> list[int]:
        from skyrl_engine.models import encode_prompt

        key = json.dumps(row.prompt)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = encode_prompt(self.tokenizer, row.prompt)
        return self._prompt_cache[key]

    def _sample(self, prompt_ids: list[list[int]], n: int, params: SamplingParams, seed: int) -> SampleBatch:
        """``n`` completions per prompt with their log-probs, prompt-major (row b answers prompt b // n).

        The backend's part of :meth:`generate`: the torch sampler here, vLLM engines in
        :class:`skyrl_engine.vllm_engine.VLLMGeneratorWorker`.
        """
        import torch

        from skyrl_engine.sampler import sample

        generator = torch.Generator().manual_seed(seed)
        return sample(
            self.model,
            [ids for ids in prompt_ids for _ in range(n)],
            params,
            eos_id=self.tokenizer.eos_token_id,
            pad_id=self.tokenizer.pad_token_id,
            generator=generator,
        )

    def generate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int) -> GeneratorOutput:
        """``n`` samples for each row, scored by each row's environment."""
        from skyrl_engine.tasks import score_response

        expanded = [row for row in rows for _ in range(n)]
        samples = self._sample([self._encode(row) for row in rows], n, params, seed)
        lengths = samples.response_lengths_B.tolist()
        responses = [
            self.tokenizer.decode(samples.response_ids_BT[b, : lengths[b]].tolist(), skip_special_tokens=True)
            for b in range(len(expanded))
        ]
        rewards, env_metrics = [], []
        for row, response in zip(expanded, responses, strict=True):
            reward, metrics = score_response(row, response)
            rewards.append(reward)
            env_metrics.append(metrics)
        prompt_texts = {}
        for row in rows:
            key = json.dumps(row.prompt)
            if key not in prompt_texts:
                prompt_texts[key] = self.tokenizer.decode(self._encode(row), skip_special_tokens=False)
        return GeneratorOutput(
            samples=samples,
            rewards_B=rewards,
            responses=responses,
            prompts=[prompt_texts[json.dumps(row.prompt)] for row in expanded],
            group_ids_B=[b // n for b in range(len(expanded))],
            env_classes=[row.env_class for row in expanded],
            data_sources=[row.data_source for row in expanded],
            env_metrics=env_metrics,
            group_size=n,
        )

    def evaluate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int, batch_size: int) -> dict[str, Any]:
        """Mean reward over ``rows`` (``n`` samples each), overall and per data source."""
        rewards: list[float] = []
        sources: list[str] = []
        for start in range(0, len(rows), max(1, batch_size)):
            out = self.generate(rows[start : start + batch_size], n, params, seed + start)
            rewards.extend(out.rewards_B)
            sources.extend(out.data_sources)
        result: dict[str, Any] = {"eval/all/avg_score": sum(rewards) / max(1, len(rewards))}
        for source in sorted(set(sources)):
            picked = [r for r, s in zip(rewards, sources, strict=True) if s == source]
            result[f"eval/{source}/avg_score"] = sum(picked) / len(picked)
        return result

    def ping(self) -> int:
        """The torch thread count (also proves the actor is up)."""
        return self.num_threads
