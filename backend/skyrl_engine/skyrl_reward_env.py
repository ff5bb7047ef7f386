"""Reward functions from a notebook cell, scoring SkyRL's samples: the skyrl-gym environment ``skyrl_nb_reward``.

With ``run.engine: skyrl`` and ``reward.functions``, the translation (``skyrl_core.skyrl_translate``) sets
``environment.env_class`` to ``skyrl_nb_reward`` and sends the ``reward.*`` settings as
``environment.skyrl_gym.skyrl_nb_reward.{functions, timeout_s, errors, max_workers, run_dir}`` (keys the bridge's
config class adds to SkyRL's); the bridge writes every row with that ``env_class``. SkyRL's generator then makes a
:class:`RewardEnv` per sample, as it makes any skyrl-gym environment (``skyrl_gym.make(env_class,
env_config=cfg.environment.skyrl_gym.<env_class>, extras=<the row's other columns>)``), and steps it once with the
response: the reward is the weighted sum of the functions' scores, as skyrl-nb's engine computes it
(``skyrl_engine.rewards.RewardPool``: the functions read from the run folder's pickles, each call with
``reward.timeout_s``; a function that raises scores 0 for the sample with ``errors: skip``, and fails the step with
``errors: fail``).

Importing this module registers the environment with skyrl-gym (``skyrl_engine.skyrl_classes`` imports it, so the
bridge's process has it before SkyRL's generator makes one). Each function's mean score over a step reaches SkyRL's
metrics as ``environment/reward/<name>`` and the samples whose reward raised as ``environment/reward/errors``
(a count); the bridge's tracker adds them under skyrl-nb's names ``reward/<name>`` and ``reward/errors``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from typing import Any

from skyrl_gym.envs import registration
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from skyrl_core.datarows import reward_columns
from skyrl_core.skyrl_translate import REWARD_ENV, TEXT_PROMPT_COLUMN
from skyrl_engine.rewards import RewardPool, load_function

__all__ = ["REWARD_ENV", "RewardEnv", "register", "reward_pool"]

SKYRL_EXTRAS = ("max_turns",)
"""Keys SkyRL's generator adds to a row's extras (not the user's columns: not handed to the reward functions)."""
ERRORS_METRIC = "reward/errors"

_pools: dict[str, RewardPool] = {}
_pools_lock = threading.Lock()


def settings_of(env_config: Any) -> dict[str, Any]:
    """The environment's settings from SkyRL's ``env_config`` (the bridge's config section, a mapping, or an
    OmegaConf node); ValueError in one line when it names no function."""
    def get(key: str, default: Any) -> Any:
        if isinstance(env_config, Mapping):
            return env_config.get(key, default)
        return getattr(env_config, key, default)

    functions = [dict(f) for f in (get("functions", None) or [])]
    if not functions:
        raise ValueError(f"environment.skyrl_gym.{REWARD_ENV}.functions: empty; the environment {REWARD_ENV} scores "
                         "with the reward functions of reward.functions (launch(reward=...))")
    return {"run_dir": str(get("run_dir", "") or ""), "functions": functions,
            "timeout_s": float(get("timeout_s", 30.0)), "errors": str(get("errors", "skip")),
            "max_workers": int(get("max_workers", 16))}


def reward_pool(settings: Mapping[str, Any]) -> RewardPool:
    """The process's one pool for ``settings`` (the functions unpickled once, their threads shared by every
    environment SkyRL makes)."""
    key = json.dumps(settings, sort_keys=True)
    with _pools_lock:
        if key not in _pools:
            functions = [load_function(f["file"], settings["run_dir"], name=f["name"], weight=float(f["weight"]))
                         for f in settings["functions"]]
            _pools[key] = RewardPool(functions, timeout_s=settings["timeout_s"], errors=settings["errors"],
                                     max_workers=settings["max_workers"])
        return _pools[key]


class RewardEnv(BaseTextEnv):
    """One single-turn episode scored by the reward functions (see the module docstring).

    ``extras`` are the row's columns but ``prompt`` and ``env_class`` (SkyRL's ``PromptDataset``): the functions
    receive them as keywords, with ``ground_truth`` from ``reward_spec`` (``skyrl_core.datarows.reward_columns``),
    and the prompt as the row gave it: its text where it was text, else the messages.

    >>> env = skyrl_gym.make("skyrl_nb_reward", env_config=settings, extras=row_extras)   # doctest: +SKIP
    >>> env.init([{"role": "user", "content": "2+2?"}]); env.step("The answer is 4.")["reward"]  # doctest: +SKIP
    1.0
    """

    def __init__(self, env_config: Any = None, extras: Mapping[str, Any] | None = None) -> None:
        super().__init__()
        self.settings = settings_of(env_config)
        row = {k: v for k, v in (extras or {}).items() if k not in SKYRL_EXTRAS}
        self.text_prompt = bool(row.pop(TEXT_PROMPT_COLUMN, False))
        spec = row.get("reward_spec")
        self.columns = reward_columns(row, spec.get("ground_truth") if isinstance(spec, Mapping) else None)
        self.prompt: Any = None
        self.scores: dict[str, float] = {}
        self.error: str | None = None

    def init(self, prompt: Any) -> tuple[Any, dict[str, Any]]:
        self.prompt = prompt
        return prompt, {}

    def step(self, action: str) -> BaseTextEnvStepOutput:
        """Score ``action`` (the response): the weighted sum of the functions' scores; the episode ends."""
        self.turns += 1
        prompt = self.prompt[0]["content"] if self.text_prompt and self.prompt else self.prompt
        scored = reward_pool(self.settings).score([prompt], [action], [self.columns], group_size=1)
        self.scores = {name: scores[0] for name, scores in scored.by_function.items()}
        self.error = scored.errors[0]
        return BaseTextEnvStepOutput(observations=[], reward=scored.rewards[0], done=True,
                                     metadata={"reward_error": self.error, "scores": dict(self.scores)})

    def get_metrics(self) -> dict[str, Any]:
        """Each function's score of this sample (``reward/<name>``) and whether its reward raised."""
        return {**{f"reward/{name}": score for name, score in self.scores.items()},
                ERRORS_METRIC: 1.0 if self.error else 0.0}

    @staticmethod
    def aggregate_metrics(metrics: list[dict[str, Any]]) -> dict[str, Any]:
        """Over a step's samples: each function's mean score, and the number of samples whose reward raised."""
        found: dict[str, list[float]] = {}
        for m in metrics:
            for key, value in m.items():
                found.setdefault(key, []).append(float(value))
        return {key: sum(v) if key == ERRORS_METRIC else sum(v) / len(v) for key, v in found.items()}

    def __repr__(self) -> str:
        names = ", ".join(f["name"] for f in self.settings["functions"])
        return f"RewardEnv({names}; turns={self.turns})"


def register() -> None:
    """Register :class:`RewardEnv` with skyrl-gym as ``skyrl_nb_reward`` (idempotent)."""
    if REWARD_ENV not in registration.registry:
        registration.register(id=REWARD_ENV, entry_point=f"{__name__}:RewardEnv")


register()
