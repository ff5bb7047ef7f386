"""The generator role: prompts → n sampled completions each → environment rewards.

:class:`GeneratorWorker` is the generator role of :class:`skyrl_engine.workers.Workers`, in the job's
process or as a Ray actor. It holds three parts, each chosen by the config alone:

- a backend that samples tokens (:mod:`skyrl_engine.protocol`): the torch sampler with its own copy of
  the policy, or vLLM engines (``generator.inference_engine.backend``);
- a rollout loop that talks to the backend in token ids only: :class:`SingleTurnLoop` here, or the
  agent loop :class:`skyrl_engine.multiturn.MultiTurnLoop` when ``generator.max_turns > 1``;
- the tokenizer (chat template) and the environments that score (:mod:`skyrl_engine.tasks`).

So every backend serves every loop. The trainer pushes new weights after every step (``load_weights``).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from skyrl_core.datarows import reward_columns
from skyrl_engine.models import encode_prompt, load_model, load_tokenizer
from skyrl_engine.multiturn import MultiTurnLoop
from skyrl_engine.policy import prepare_worker
from skyrl_engine.protocol import context_tokens, to_sample_batch
from skyrl_engine.rewards import RewardPool, register_shipped_environments
from skyrl_engine.sampler import TorchSampler
from skyrl_engine.tasks import EnvSettings, register_builtin_envs, score_response
from skyrl_engine.types import GeneratorOutput, PromptRow

if TYPE_CHECKING:
    from skyrl_core.config import GeneratorConfig, SamplingParams
    from skyrl_engine.protocol import TokenGenerator


class SingleTurnLoop:
    """One assistant turn per sample: ``n`` completions per prompt, each scored by its row's environment."""

    def __init__(self, tokenizer: Any, backend: TokenGenerator,
                 env_configs: dict[str, dict[str, Any]] | None = None, rewards: RewardPool | None = None) -> None:
        self.tokenizer = tokenizer
        self.backend = backend
        self.rewards = rewards
        """Reward functions (``reward.functions``) that score instead of the rows' environments."""

        self.env_configs = env_configs or {}
        self.env_settings = EnvSettings(self.env_configs)
        self._prompt_cache: dict[str, list[int]] = {}

    def encode(self, row: PromptRow) -> list[int]:
        """The row's chat prompt as token ids (generation prompt appended), cached per prompt."""

        key = json.dumps(row.prompt)
        if key not in self._prompt_cache:
            self._prompt_cache[key] = encode_prompt(self.tokenizer, row.prompt)
        return self._prompt_cache[key]

    def generate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int) -> GeneratorOutput:
        """``n`` samples for each row, scored by each row's environment."""

        expanded = [row for row in rows for _ in range(n)]
        prompt_ids = [self.encode(row) for row in rows]
        completions = self.backend.generate(prompt_ids, n, params, seed, stop_token_ids=[self.tokenizer.eos_token_id])
        samples = to_sample_batch(completions, prompt_ids, self.tokenizer.pad_token_id)
        responses = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in completions.response_ids]
        step_metrics: dict[str, float] = {}
        columns = None
        if self.rewards is not None:  # the user's reward functions, in their pool
            scored = self.rewards.score([row.prompt if row.raw_prompt is None else row.raw_prompt for row in expanded],
                                        responses, [reward_columns(row.extras, row.ground_truth) for row in expanded],
                                        group_size=n)
            rewards, env_metrics = scored.rewards, [{} for _ in expanded]
            step_metrics, columns = scored.metrics(), scored.columns()
        else:  # each row's environment
            rewards, env_metrics = [], []
            for row, response in zip(expanded, responses, strict=True):
                reward, metrics = score_response(row, response, env_config=self.env_settings(row.env_class))
                rewards.append(reward)
                env_metrics.append(metrics)
        prompt_texts = [self.tokenizer.decode(ids, skip_special_tokens=False) for ids in prompt_ids]
        return GeneratorOutput(
            samples=samples,
            rewards_B=rewards,
            responses=responses,
            prompts=[prompt_texts[b // n] for b in range(len(expanded))],
            group_ids_B=[b // n for b in range(len(expanded))],
            env_classes=[row.env_class for row in expanded],
            data_sources=[row.data_source for row in expanded],
            env_metrics=env_metrics,
            group_size=n,
            sample_columns=columns,
            metrics=step_metrics,
        )

    def __repr__(self) -> str:
        return f"SingleTurnLoop({self.backend!r}{', ' + repr(self.rewards) if self.rewards else ''})"


class GeneratorWorker:
    """The generator role: a backend, a rollout loop and the environments (see the module docstring).

    ``backend`` hands in a generation backend that is already running (vLLM engines shared by several
    jobs' workers); by default the worker starts the one the config names.

    >>> worker = GeneratorWorker(model_dir, cfg.generator, num_threads=1)                  # doctest: +SKIP
    >>> out = worker.generate(rows, n=4, params=cfg.generator.sampling_params, seed=0)      # doctest: +SKIP
    """

    def __init__(self, model_path: str, generator: GeneratorConfig, *, num_threads: int = 0,
                 plugins: list[str] | tuple[str, ...] = (), env_configs: dict[str, dict[str, Any]] | None = None,
                 placement: Any | None = None, colocated: bool = False, vllm_python: str | None = None,
                 seed: int = 0, engine_kwargs: dict[str, Any] | None = None,
                 backend: TokenGenerator | None = None, reward: Any = None, run_dir: str = "",
                 shipped_envs: dict[str, str] | None = None) -> None:
        from skyrl_core.choices import Backend

        self.num_threads = prepare_worker(num_threads, plugins)
        trained_positions = model_max_positions(model_path)  # read once: the loop and vLLM's context
        self.backend: TokenGenerator
        self.tokenizer = load_tokenizer(model_path)
        self.backend_name = str(generator.inference_engine.backend)
        self.owns_backend = backend is None  # a backend handed in (engines already running) outlives us
        if backend is not None:
            self.backend = backend
        elif generator.inference_engine.backend == Backend.VLLM:
            # vLLM is an optional dependency, in its own environment
            from skyrl_engine.vllm_engine import VLLMGenerator

            kwargs = {"python": vllm_python, "num_threads": num_threads or None, "seed": seed,
                      # vLLM's "auto" runs a float32 checkpoint in 16 bits; on CPU keep the trainer's float32
                      # so the engine's log-probs match the trainer's.
                      "dtype": "float32" if placement is None or placement.plan.device == "CPU" else "auto",
                      **(engine_kwargs or {})}
            if generator.max_turns > 1:  # episodes grow past one prompt: room as the torch sampler has

                kwargs.setdefault("max_model_len", context_tokens(trained_positions))
            self.backend = VLLMGenerator.from_config(
                generator.inference_engine, model_path, colocated=colocated, placement=placement, **kwargs)
        else:

            self.backend = TorchSampler(load_model(model_path), pad_id=self.tokenizer.pad_token_id,
                                        share_prefill=generator.inference_engine.enable_prefix_caching)
        self.version = 0
        if generator.max_turns > 1:

            self.loop: SingleTurnLoop | MultiTurnLoop = MultiTurnLoop(
                self.tokenizer, self.backend, generator.max_turns, env_configs, trained_positions=trained_positions)
        else:
            self.loop = SingleTurnLoop(self.tokenizer, self.backend, env_configs,
                                       RewardPool.from_config(reward, run_dir) if reward is not None else None)

        register_builtin_envs()
        register_shipped_environments(shipped_envs or {}, run_dir)  # classes a notebook cell defined

    def generate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int) -> GeneratorOutput:
        """``n`` rollouts per row with the current weights (the loop decides single- or multi-turn)."""
        self.backend.wake_up()
        return self.loop.generate(rows, n, params, seed)

    def eval_samples(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int,
                     batch_size: int) -> list[dict[str, Any]]:
        """``n`` samples of every row with the current weights, one record each (the eval store's row,
        ``skyrl_core.eval_store.SAMPLE_COLUMNS``): the rows go in batches of ``batch_size``, the batch starting at
        row ``start`` seeded ``seed + start``. The in-training eval (:meth:`evaluate`) and the eval job
        (``skyrl_engine.evaluation``) both sample through here, so a checkpoint's eval job and the run's own eval at
        that step draw the same samples."""
        records: list[dict[str, Any]] = []
        for start in range(0, len(rows), max(1, batch_size)):
            batch = rows[start : start + batch_size]
            records.extend(sample_records(self.generate(batch, n, params, seed + start), batch, start))
        return records

    def evaluate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int, batch_size: int) -> dict[str, Any]:
        """Mean reward over ``rows`` (``n`` samples each), overall and per data source: :func:`eval_metrics` of
        :meth:`eval_samples`."""
        return eval_metrics(self.eval_samples(rows, n, params, seed, batch_size))

    def load_weights(self, weights: Any) -> dict[str, float]:
        """Install the trainer's weights (a state dict, or a LoRA adapter where the backend takes one) in the
        backend; ``{"seconds", "bytes"}`` it took and received."""
        self.version += 1
        seconds = self.backend.update_weights(weights, self.version)
        return {"seconds": float(seconds), "bytes": float(payload_bytes(weights))}

    def accepts_lora_adapter(self) -> bool:
        """Whether the backend merges LoRA adapters itself (a LoRA policy then syncs only its adapters)."""
        return bool(getattr(self.backend, "accepts_lora_adapter", False))

    def sleep(self) -> None:
        """Free device memory while the policy trains (colocated vLLM on GPU); a no-op otherwise."""
        self.backend.sleep()

    def shutdown(self) -> None:
        """Stop what the backend started (vLLM engine actors), unless the backend was handed in."""
        if self.owns_backend:
            self.backend.shutdown()

    def ping(self) -> int:
        """The torch thread count (also proves the actor is up)."""
        return self.num_threads

    def __repr__(self) -> str:
        return f"GeneratorWorker(backend={self.backend_name}, loop={type(self.loop).__name__}, version={self.version})"

    def _repr_html_(self) -> str:
        import html

        return f"<code>{html.escape(repr(self))}</code>"


def ground_truth_text(value: Any) -> str | None:
    """A row's expected answer as the run store keeps it: text as it is, JSON for a structured one."""
    return value if isinstance(value, str) or value is None else json.dumps(value, default=str)


def sample_records(out: GeneratorOutput, rows: list[PromptRow], first_index: int = 0) -> list[dict[str, Any]]:
    """One eval record per sample of ``out`` (``n`` samples of each of ``rows``, prompt-major): the prompt's index
    (``first_index`` + its place in ``rows``), the sample's index among its prompt's, the templated prompt, the
    response, its reward and length in tokens, the row's ground truth and data source, and the sample's own
    columns (``reward_error``, ``reward/<fn>``; a multi-turn episode's ``turns``)."""
    lengths = out.samples.response_mask_BT.sum(-1).tolist()
    seen: dict[int, int] = {}
    records = []
    for b, group in enumerate(out.group_ids_B):
        sample_index = seen.get(group, 0)
        seen[group] = sample_index + 1
        columns = out.sample_columns[b] if out.sample_columns is not None else {}
        records.append({
            "prompt_index": first_index + group, "sample_index": sample_index, "prompt": out.prompts[b],
            "response": out.responses[b], "reward": float(out.rewards_B[b]), "response_length": int(lengths[b]),
            "ground_truth": ground_truth_text(rows[group].ground_truth), "data_source": out.data_sources[b],
            "reward_error": columns.get("reward_error"), "finish_reason": out.samples.finish_reasons[b],
            **{k: v for k, v in columns.items() if k != "reward_error"}})
    return records


def eval_metrics(records: list[dict[str, Any]]) -> dict[str, float]:
    """``eval/all/avg_score`` (the mean reward of every sample) and ``eval/<data source>/avg_score``: the in-training
    eval's metrics, from :func:`sample_records`' records."""
    rewards = [r["reward"] for r in records]
    result: dict[str, float] = {"eval/all/avg_score": sum(rewards) / max(1, len(rewards))}
    for source in sorted({r["data_source"] for r in records}):
        picked = [r["reward"] for r in records if r["data_source"] == source]
        result[f"eval/{source}/avg_score"] = sum(picked) / len(picked)
    return result


def payload_bytes(weights: Any) -> int:
    """Bytes of a weight sync's payload: a LoRA adapter's, a state dict's tensors (0 for a directory)."""
    if hasattr(weights, "nbytes") and not hasattr(weights, "items"):
        return int(weights.nbytes)
    if hasattr(weights, "values"):  # a tensor held under two names (tied weights) moves once
        unique = {id(t): t for t in weights.values() if hasattr(t, "element_size")}
        return sum(int(t.numel() * t.element_size()) for t in unique.values())
    return 0


def model_max_positions(model_path: str) -> int:
    """``max_position_embeddings`` from a model directory's config.json (0 when it does not say)."""
    import os

    try:
        with open(os.path.join(model_path, "config.json")) as f:
            return int(json.load(f).get("max_position_embeddings") or 0)
    except (OSError, ValueError):
        return 0
