"""Multi-turn rollouts: the agent loop of SkyRL's ``SkyRLGymGenerator``, on any generation backend.

One episode per sample::

    conversation = env.init(prompt)
    repeat until done or generator.max_turns:
        assistant turn  <- sample (stops at EOS or max_generate_length)
        step            <- env.step(assistant text): reward, done, observation messages
        observation     -> appended as chat turns (the template's user/tool turn + generation prompt)

Everything after the prompt forms the sample's response tokens. The policy is trained only on the
tokens it generated: ``GeneratorOutput.loss_mask_BT`` is 1 on assistant tokens and 0 on observation
tokens (and on an EOS the loop adds to close a truncated turn), while the response mask keeps them
all (the model attends to the observations). The sample's reward is the sum of its turns' rewards,
which is what SkyRL's outcome estimators see when turns carry rewards. An episode also ends when its
context reaches ``max_context_tokens`` (the model's ``max_position_embeddings``, at least
``MIN_CONTEXT_TOKENS``), with finish reason ``length``.

Each sample's turns go to the run store as the ``turns`` column: a JSON list of
``{role, content, token_start, token_end, reward}``, spans indexing the response tokens.

Each turn samples through the token-level protocol (:mod:`skyrl_engine.protocol`), one completion per
active episode, so the torch sampler and vLLM engines both run it. Turn ``k`` of a step draws with
seed ``step_seed(seed, k, 2)``.

Environments that need settings (text2sql's database folder, search's retriever URL) take them
from ``env_configs`` (``{env_class: {key: value}}``); :func:`skyrl_engine.tasks.env_configs_from_environ`
reads them from ``SKYRL_NB_TEXT2SQL_DB_PATH`` and ``SKYRL_NB_SEARCH_URL`` in the driver, so Ray actors
get them as arguments.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from skyrl_engine.models import encode_prompt
from skyrl_engine.protocol import context_tokens
from skyrl_engine.tasks import EnvSettings, make_env
from skyrl_engine.types import GeneratorOutput, PromptRow, SampleBatch, left_pad, step_seed

if TYPE_CHECKING:
    from skyrl_core.config import SamplingParams
    from skyrl_engine.protocol import TokenGenerator

# A neutral conversation the observation turns are rendered after (SkyRL's trick), so templates that
# add a default system prompt to a conversation's start do not add it again mid-episode.
_BASE_CONVERSATION = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]


class _Episode:
    """One sample's running state: its env, its token lists and its turns."""

    def __init__(self, env: Any, prompt_ids: list[int]):
        self.env = env
        self.prompt_ids = prompt_ids
        self.response_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.turns: list[dict[str, Any]] = []
        self.turn_rewards: list[float] = []
        self.finish_reason = "length"
        self.done = False

    def add(self, ids: list[int], trained: bool, logprobs: list[float] | None = None) -> tuple[int, int]:
        start = len(self.response_ids)
        self.response_ids += ids
        self.loss_mask += [1 if trained else 0] * len(ids)
        self.logprobs += logprobs if logprobs is not None else [0.0] * len(ids)
        return start, len(self.response_ids)

    @property
    def context_len(self) -> int:
        return len(self.prompt_ids) + len(self.response_ids)


class MultiTurnLoop:
    """The agent loop: up to ``max_turns`` assistant turns per episode (see the module docstring)."""

    def __init__(self, tokenizer: Any, backend: TokenGenerator, max_turns: int = 5,
                 env_configs: dict[str, dict[str, Any]] | None = None, max_context_tokens: int | None = None,
                 trained_positions: int = 0) -> None:
        self.tokenizer = tokenizer
        self.backend = backend
        self.max_turns = int(max_turns)

        self.env_configs = env_configs or {}
        self.env_settings = EnvSettings(self.env_configs)
        wanted = int(max_context_tokens or context_tokens(trained_positions))
        limit = backend.max_context_tokens  # e.g. a vLLM engine's max_model_len (None: no hard limit)
        self.max_context_tokens = min(wanted, int(limit)) if limit else wanted
        self._base_ids = self._template(_BASE_CONVERSATION, add_generation_prompt=False)

    def __repr__(self) -> str:
        return (f"MultiTurnLoop(max_turns={self.max_turns}, max_context_tokens={self.max_context_tokens}, "
                f"backend={self.backend!r})")

    def _template(self, messages: list[dict[str, str]], add_generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return list(ids)

    def observation_ids(self, messages: list[dict[str, str]]) -> list[int]:
        """Token ids of observation turns plus the generation prompt, as they continue a conversation."""
        full = self._template(_BASE_CONVERSATION + list(messages), add_generation_prompt=True)
        return full[len(self._base_ids):]

    def _start(self, row: PromptRow) -> _Episode:

        # skyrl-gym's environments read their turn budget from the row's extras (text2sql defaults to 5,
        # search to 2); a row that does not say gets generator.max_turns, so the env's "turns left"
        # and the loop agree.
        extras = {"max_turns": self.max_turns, **(row.extras or {})}
        env = make_env(row.env_class, extras, env_config=self.env_settings(row.env_class))
        conversation, _ = env.init([dict(m) for m in row.prompt])
        return _Episode(env, encode_prompt(self.tokenizer, conversation))

    def generate(self, rows: list[PromptRow], n: int, params: SamplingParams, seed: int) -> GeneratorOutput:
        """``n`` episodes per row, each up to ``max_turns`` assistant turns (see the module docstring)."""
        expanded = [row for row in rows for _ in range(n)]
        episodes = [self._start(row) for row in expanded]
        eos = self.tokenizer.eos_token_id
        try:
            for turn in range(self.max_turns):
                for ep in episodes:
                    if not ep.done and ep.context_len >= self.max_context_tokens - 1:
                        ep.done, ep.finish_reason = True, "length"
                active = [ep for ep in episodes if not ep.done]
                if not active:
                    break
                budget = self.max_context_tokens - max(ep.context_len for ep in active)
                turn_params = params.model_copy(
                    update={"max_generate_length": max(1, min(params.max_generate_length, budget))})
                out = self.backend.generate([ep.prompt_ids + ep.response_ids for ep in active], 1, turn_params,
                                            step_seed(seed, turn, 2), stop_token_ids=[eos])
                for i, ep in enumerate(active):
                    ids = out.response_ids[i]
                    text = self.tokenizer.decode(ids, skip_special_tokens=True)
                    start, end = ep.add(ids, True, out.logprobs[i])
                    if out.finish_reasons[i] != "stop":
                        ep.add([eos], False)  # close the turn so the next one reads as the template would
                    step = ep.env.step(text)
                    reward = float(step["reward"] or 0.0)
                    ep.turn_rewards.append(reward)
                    ep.turns.append({"role": "assistant", "content": text, "token_start": start, "token_end": end,
                                     "reward": reward})
                    ep.finish_reason = out.finish_reasons[i]
                    if step["done"] or turn == self.max_turns - 1:
                        ep.done = True
                        continue
                    observations = [m for m in (step.get("observations") or []) if m]
                    obs_start, obs_end = ep.add(self.observation_ids(observations), False)
                    for m in observations:
                        ep.turns.append({"role": str(m.get("role", "user")), "content": str(m.get("content", "")),
                                         "token_start": obs_start, "token_end": obs_end, "reward": None})
            env_metrics = [dict(ep.env.get_metrics() or {}) for ep in episodes]
        finally:
            for ep in episodes:
                ep.env.close()
        return self._output(rows, expanded, episodes, env_metrics, n)

    def _output(self, rows, expanded, episodes: list[_Episode], env_metrics, n: int) -> GeneratorOutput:
        import torch


        pad = self.tokenizer.pad_token_id
        prompt_ids_BP, prompt_mask_BP = left_pad([ep.prompt_ids for ep in episodes], pad)
        B, T = len(episodes), max(1, max(len(ep.response_ids) for ep in episodes))
        response_ids_BT = torch.full((B, T), pad, dtype=torch.long)
        response_mask_BT = torch.zeros((B, T), dtype=torch.long)
        loss_mask_BT = torch.zeros((B, T), dtype=torch.long)
        logprobs_BT = torch.zeros((B, T), dtype=torch.float32)
        for b, ep in enumerate(episodes):
            L = len(ep.response_ids)
            response_ids_BT[b, :L] = torch.tensor(ep.response_ids, dtype=torch.long)
            response_mask_BT[b, :L] = 1
            loss_mask_BT[b, :L] = torch.tensor(ep.loss_mask, dtype=torch.long)
            logprobs_BT[b, :L] = torch.tensor(ep.logprobs, dtype=torch.float32)
        samples = SampleBatch(prompt_ids_BP=prompt_ids_BP, prompt_mask_BP=prompt_mask_BP, response_ids_BT=response_ids_BT,
                              response_mask_BT=response_mask_BT, logprobs_BT=logprobs_BT,
                              finish_reasons=[ep.finish_reason for ep in episodes])
        num_turns = [sum(1 for t in ep.turns if t["role"] == "assistant") for ep in episodes]
        metrics: dict[str, float] = {
            "generate/avg_num_turns": sum(num_turns) / len(num_turns),
            "generate/max_num_turns": float(max(num_turns)),
            "generate/avg_env_tokens": float((response_mask_BT - loss_mask_BT).sum()) / B,
        }
        for t in range(max(num_turns)):
            rewards_t = [ep.turn_rewards[t] for ep in episodes if len(ep.turn_rewards) > t]
            metrics[f"reward/turn_{t + 1}/avg_reward"] = sum(rewards_t) / len(rewards_t)
            metrics[f"generate/turn_{t + 1}/num_episodes"] = float(len(rewards_t))
        prompt_texts = {}
        for row, ep in zip(expanded, episodes, strict=True):
            prompt_texts.setdefault(json.dumps(row.prompt), self.tokenizer.decode(ep.prompt_ids, skip_special_tokens=False))
        return GeneratorOutput(
            samples=samples,
            rewards_B=[sum(ep.turn_rewards) for ep in episodes],
            responses=[self.tokenizer.decode(ep.response_ids, skip_special_tokens=False) for ep in episodes],
            prompts=[prompt_texts[json.dumps(row.prompt)] for row in expanded],
            group_ids_B=[b // n for b in range(B)],
            env_classes=[row.env_class for row in expanded],
            data_sources=[row.data_source for row in expanded],
            env_metrics=env_metrics,
            group_size=n,
            loss_mask_BT=loss_mask_BT,
            sample_columns=[{"turns": json.dumps(ep.turns), "num_turns": k} for ep, k in zip(episodes, num_turns, strict=True)],
            metrics=metrics,
        )
