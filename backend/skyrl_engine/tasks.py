"""Datasets in SkyRL's format and the environments that score them.

A dataset row (Parquet or JSONL) looks like SkyRL's::

    {"data_source": "arithmetic",
     "prompt": [{"role": "user", "content": "17+25"}],
     "env_class": "arithmetic",
     "reward_spec": {"method": "rule", "ground_truth": "2"},
     "extra_info": {"split": "train", "index": 0}}

Environments come from skyrl-gym's registry (``skyrl_gym.make``). Importing this module registers
the built-in ``arithmetic`` environment there; skyrl-gym's own ones (``gsm8k``, ...) work unchanged.

One idea: the rows a job trains and evaluates on, from wherever they come (built-in generators, files, URLs), and
the built-in tasks' scoring; the built-in generators sit beside the loader because both define the row shape.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from skyrl_core.catalog import BUILTIN_PREFIX
from skyrl_engine.text2sql_data import builtin_db_root, text2sql_rows
from skyrl_engine.types import PromptRow

ARITHMETIC_SPLITS = {"train": 4096, "test": 256}
ARITHMETIC_SEED = {"train": 1234, "test": 4321}
ARITHMETIC_MAX_OPERAND = 4  # operands 0..4: 25 facts, one-digit sums; small enough that RL visibly learns in minutes


# SkyRL's defaults for the skyrl-gym environments that take a config (environment.skyrl_gym.*).
DEFAULT_ENV_CONFIGS: dict[str, dict[str, Any]] = {
    "text2sql": {"db_path": "/home/ray/default/sql_data"},
    "search": {"log_requests": False, "search_url": "http://127.0.0.1:8000/retrieve", "topk": 3, "timeout": 30},
}
ENVIRON_KEYS = {"SKYRL_NB_TEXT2SQL_DB_PATH": ("text2sql", "db_path"), "SKYRL_NB_SEARCH_URL": ("search", "search_url")}


# --------------------------------------------------------------------------------------------
# the built-in arithmetic task


def arithmetic_rows(split: str) -> list[dict[str, Any]]:
    """The built-in arithmetic task: ``"a+b"`` → ``a+b`` for operands 0..4 (sum ``<= 8``, one answer token).

    (Sums modulo 10 are the classic slow-to-learn "grokking" task; a tiny model on a CPU does not
    get past chance in minutes, so the built-in task keeps sums to one digit. With all 55 one-digit
    sums the warm-started tiny model gained only ~0.13 reward in 150 GRPO steps; 25 facts leave
    room for a visible gain within the quickstart's budget.)

    Generated deterministically (fixed seed per split), so every process sees the same rows.
    """
    import numpy as np

    if split not in ARITHMETIC_SPLITS:
        raise ValueError(f"builtin://arithmetic/{split}: unknown split; allowed: train, test")
    rng = np.random.default_rng(ARITHMETIC_SEED[split])
    n = ARITHMETIC_SPLITS[split]
    a_N = rng.integers(0, ARITHMETIC_MAX_OPERAND + 1, size=n)
    b_N = rng.integers(0, ARITHMETIC_MAX_OPERAND + 1, size=n)
    rows = []
    for i, (a, b) in enumerate(zip(a_N.tolist(), b_N.tolist(), strict=True)):
        rows.append(
            {
                "data_source": "arithmetic",
                "prompt": [{"role": "user", "content": f"{a}+{b}"}],
                "env_class": "arithmetic",
                "reward_spec": {"method": "rule", "ground_truth": str(a + b)},
                "extra_info": {"split": split, "index": i, "a": a, "b": b},
            }
        )
    return rows


def _arithmetic_reward(response: str, ground_truth: str) -> float:
    """1.0 when the response is exactly the answer (surrounding whitespace ignored), else 0.0."""
    return 1.0 if response.strip() == str(ground_truth).strip() else 0.0


def _make_arithmetic_env_class():
    from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

    class ArithmeticEnv(BaseTextEnv):
        """Single-turn env for the built-in arithmetic task: reward 1 for the exact last digit."""

        def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
            super().__init__()
            extras = extras or {}
            if "ground_truth" not in extras.get("reward_spec", {}):
                raise ValueError("arithmetic env: the row needs reward_spec.ground_truth")
            self.ground_truth = extras["reward_spec"]["ground_truth"]

        def step(self, action: str) -> BaseTextEnvStepOutput:
            reward = _arithmetic_reward(action, self.ground_truth)
            return BaseTextEnvStepOutput(observations=[], reward=reward, done=True, metadata={})

    ArithmeticEnv.__module__ = __name__
    ArithmeticEnv.__qualname__ = "ArithmeticEnv"
    return ArithmeticEnv


# --------------------------------------------------------------------------------------------
# the built-in word problems (the smollm2 preset): GSM8K-style, scored by skyrl-gym's gsm8k extraction

WORD_PROBLEM_SPLITS = {"train": 2048, "test": 64, "heldout": 200}
WORD_PROBLEM_SEED = {"train": 2024, "test": 4202, "heldout": 7707}
WORD_PROBLEM_THREE_DIGITS = 0.3
_NAMES = ("Sam", "Mia", "Leo", "Ava", "Noah", "Emma", "Omar", "Lena", "Ravi", "Yuki")
_ITEMS = ("apples", "books", "coins", "stamps", "marbles", "stickers", "shells", "cards")
# (question, operation): {n} a name, {a} and {b} the numbers, {items} what is counted
_WORD_TEMPLATES = (
    ("{n} has {a} {items} and gets {b} more. How many {items} does {n} have now?", "+"),
    ("{n} collected {a} {items} on Monday and {b} on Tuesday. How many {items} did {n} collect in all?", "+"),
    ("A box holds {a} {items}. {n} puts in {b} more. How many {items} are in the box now?", "+"),
    ("{n} had {a} {items} and gave away {b}. How many {items} does {n} have left?", "-"),
    ("A shop had {a} {items} and sold {b} of them. How many {items} are left?", "-"),
    ("{n} needs {a} {items} and already has {b}. How many more {items} does {n} need?", "-"),
)
# One worked example before the question, as a chat turn: the format an instruct model then follows
# ("... = 17. The answer is 17."). Without it SmolLM2-135M rambles past its answer; skyrl-gym's strict
# "#### n" format gives an untrained model no signal at all (docs/models.md).
WORD_PROBLEM_EXAMPLE = (
    {"role": "user", "content": "Tom has 12 pens and gets 5 more. How many pens does Tom have now?"},
    {"role": "assistant", "content": "12 + 5 = 17. The answer is 17."},
)


def word_problem_rows(split: str) -> list[dict[str, Any]]:
    """Built-in arithmetic word problems in SkyRL's gsm8k row format, for ``builtin://word_problems/{split}``.

    Each is one addition or subtraction of a two- or three-digit number (three digits for 30%) and a
    two-digit one, from one of
    ``_WORD_TEMPLATES`` (answers are never negative), asked after one worked example. Scored by the
    ``gsm8k_flexible`` environment: the last number in the response against ``reward_spec.ground_truth``.
    Generated deterministically (a fixed seed per split), so every process sees the same rows. ``heldout``
    (200 rows, for evaluating a trained model: ``skyrl_nb.evaluate``) skips every question ``train`` asks.
    """
    import numpy as np

    if split not in WORD_PROBLEM_SPLITS:
        raise ValueError(f"builtin://word_problems/{split}: unknown split; allowed: {', '.join(WORD_PROBLEM_SPLITS)}")
    rng = np.random.default_rng(WORD_PROBLEM_SEED[split])
    seen = {r["extra_info"]["question"] for r in word_problem_rows("train")} if split == "heldout" else set()
    rows: list[dict[str, Any]] = []
    while len(rows) < WORD_PROBLEM_SPLITS[split]:
        i = len(rows)
        template, op = _WORD_TEMPLATES[int(rng.integers(len(_WORD_TEMPLATES)))]
        # two digits mostly, three digits for one in WORD_PROBLEM_THREE_DIGITS: SmolLM2-135M solves few of
        # those, and a task it never solves gives GRPO no group to learn from (docs/models.md)
        a = int(rng.integers(100, 1000)) if rng.random() < WORD_PROBLEM_THREE_DIGITS else int(rng.integers(10, 100))
        b = int(rng.integers(10, 100))
        if op == "-" and b > a:
            a, b = b, a
        answer = a + b if op == "+" else a - b
        question = template.format(n=_NAMES[int(rng.integers(len(_NAMES)))], a=a, b=b,
                                   items=_ITEMS[int(rng.integers(len(_ITEMS)))])
        if question in seen:
            continue
        rows.append({
            "data_source": "word_problems",
            "prompt": [*WORD_PROBLEM_EXAMPLE, {"role": "user", "content": question}],
            "env_class": "gsm8k_flexible",
            "reward_spec": {"method": "rule", "ground_truth": str(answer)},
            "extra_info": {"split": split, "index": i, "a": a, "b": b, "op": op, "question": question},
        })
    return rows


def flexible_answer(response: str) -> str | None:
    """The answer skyrl-gym's gsm8k extraction finds in its flexible mode (the last number in the response),
    without the sentence's trailing '.' or thousands commas it keeps ("... is 1,204." -> "1204")."""
    from skyrl_gym.envs.gsm8k.utils import extract_solution

    found = extract_solution(response, method="flexible")
    if found is None:
        return None
    found = found.replace(",", "").rstrip(".")
    return found or None


def _make_gsm8k_flexible_env_class():
    from skyrl_gym.envs.gsm8k.env import GSM8kEnv

    class GSM8kFlexibleEnv(GSM8kEnv):
        """skyrl-gym's single-turn gsm8k environment, scored by the last number in the response
        (:func:`flexible_answer`) instead of the strict ``#### n`` format: 1.0 when it is the ground truth."""

        def _get_reward(self, action: str) -> float:
            return 1.0 if flexible_answer(action) == str(self.ground_truth).strip() else 0.0

    GSM8kFlexibleEnv.__module__ = __name__
    GSM8kFlexibleEnv.__qualname__ = "GSM8kFlexibleEnv"
    return GSM8kFlexibleEnv


_LAZY_ENVS = {"ArithmeticEnv": _make_arithmetic_env_class, "GSM8kFlexibleEnv": _make_gsm8k_flexible_env_class}


def __getattr__(name: str):
    # The env classes subclass skyrl-gym's; build them lazily so importing tasks stays light.
    if name in _LAZY_ENVS:
        cls = _LAZY_ENVS[name]()
        globals()[name] = cls
        return cls
    raise AttributeError(name)


def register_builtin_envs() -> None:
    """Register skyrl-nb's and the plug-ins' environments (``skyrl_core.registry.ENVIRONMENTS``) with skyrl-gym.

    Idempotent; skyrl-gym's own environments are registered by skyrl-gym itself.
    """
    from skyrl_gym.envs import registration

    from skyrl_core.registry import ENVIRONMENTS

    for name, entry_point in ENVIRONMENTS.registered().items():
        if name not in registration.registry:
            registration.register(id=name, entry_point=entry_point)


def env_configs_from_environ(environ: dict[str, str] | None = None) -> dict[str, dict[str, Any]]:
    """Environment settings from ``SKYRL_NB_*`` variables (see the module docstring)."""
    environ = os.environ if environ is None else environ
    found: dict[str, dict[str, Any]] = {}
    for var, (env_class, key) in ENVIRON_KEYS.items():
        if environ.get(var):
            found.setdefault(env_class, {})[key] = environ[var]
    return found


def env_config_for(env_class: str, env_configs: dict[str, dict[str, Any]] | None):
    """The config object skyrl-gym's ``env_class`` reads (attribute access, as SkyRL's DictConfig)."""
    from omegaconf import OmegaConf

    settings = dict(DEFAULT_ENV_CONFIGS.get(env_class, {}))
    if env_class == "text2sql" and not (env_configs or {}).get("text2sql", {}).get("db_path"):

        settings["db_path"] = builtin_db_root()
    settings.update((env_configs or {}).get(env_class, {}))
    return OmegaConf.create(settings)


class EnvSettings:
    """Each env class's settings (:func:`env_config_for`), built on first use and then handed to every env of
    that class, as SkyRL's generator hands one config to all of them (an ``OmegaConf.create`` per sample was
    15% of a tiny-model step). A rollout loop holds one.

    >>> settings = EnvSettings({"search": {"topk": 5}})
    >>> settings("search").topk, settings("search") is settings("search")
    (5, True)
    """

    def __init__(self, env_configs: dict[str, dict[str, Any]] | None = None) -> None:
        self.env_configs = env_configs or {}
        self._built: dict[str, Any] = {}

    def __call__(self, env_class: str) -> Any:
        if env_class not in self._built:
            self._built[env_class] = env_config_for(env_class, self.env_configs)
        return self._built[env_class]


def make_env(env_class: str, extras: dict[str, Any], env_configs: dict[str, dict[str, Any]] | None = None,
             env_config: Any = None):
    """An environment from skyrl-gym's registry, as SkyRL's generator makes it, with its settings.

    ``env_config``: the class's settings from an :class:`EnvSettings`; else built here from ``env_configs``.
    """
    import skyrl_gym

    register_builtin_envs()
    if env_config is None:
        env_config = env_config_for(env_class, env_configs)
    return skyrl_gym.make(env_class, env_config=env_config, extras=extras)


def score_response(row: PromptRow, response: str, env_configs: dict[str, dict[str, Any]] | None = None,
                   env_config: Any = None) -> tuple[float, dict[str, Any]]:
    """Run one single-turn episode: init the env with the prompt, step with the response.

    Returns ``(reward, env_metrics)``. ``env_config`` as in :func:`make_env`.
    """
    env = make_env(row.env_class, row.extras, env_configs, env_config)
    try:
        env.init(row.prompt)
        out = env.step(response)
        return float(out["reward"]), dict(env.get_metrics() or {})
    finally:
        env.close()


# --------------------------------------------------------------------------------------------
# loading


def read_rows(path: str) -> list[dict[str, Any]]:
    """The raw rows of one dataset path: a file, an object-store URL, or ``builtin://arithmetic/{train,test}``."""
    if path.startswith(BUILTIN_PREFIX):
        name = path[len(BUILTIN_PREFIX) :]
        if name.startswith("text2sql/"):  # multi-turn text2sql on built-in SQLite files (text2sql_data.py)

            return text2sql_rows(name.split("/", 1)[1])
        match = re.fullmatch(r"(arithmetic|word_problems)/(\w+)", name)
        if not match:
            from skyrl_core.catalog import BUILTIN_DATASETS

            raise ValueError(f"{path}: unknown built-in dataset; allowed: {', '.join(BUILTIN_DATASETS)}")
        return (arithmetic_rows if match.group(1) == "arithmetic" else word_problem_rows)(match.group(2))
    from skyrl_core.datarows import iter_rows

    if "://" not in path and not os.path.exists(path):
        raise FileNotFoundError(f"{path}: dataset file not found")
    return list(iter_rows(path))


def _to_prompt_row(raw: dict[str, Any], default_env_class: str, where: str,
                   columns: dict[str, str] | None = None) -> PromptRow:
    """One row as a :class:`PromptRow`, in any shape ``datarows.canonical_row`` reads (validation checks the same)."""
    from skyrl_core.datarows import canonical_row, prompt_parts
    from skyrl_core.user_inputs import reward_prompt

    row = canonical_row(raw, columns, where)
    prompt, env_class, reward_spec = prompt_parts(row, where)
    extras = {k: v for k, v in row.items() if k not in ("prompt", "env_class")}
    return PromptRow(
        prompt=prompt,
        env_class=str(env_class or default_env_class),
        data_source=str(row.get("data_source") or "unknown"),
        ground_truth=reward_spec.get("ground_truth"),
        extras=extras,
        raw_prompt=reward_prompt(row),
    )


def load_prompts(paths: list[str], default_env_class: str = "arithmetic", *, columns: dict[str, str] | None = None,
                 run_dir: str | None = None) -> list[PromptRow]:
    """All rows of ``paths`` (in order) as :class:`PromptRow`; ``inputs://`` paths are files in ``run_dir``
    (``skyrl_core.user_inputs``), ``columns`` is ``data.columns``.
    >>> rows = load_prompts(["builtin://arithmetic/test"])
    >>> rows[0].env_class
    'arithmetic'
    """
    from skyrl_core.registry import shown
    from skyrl_core.user_inputs import INPUTS_PREFIX, resolve_input

    rows: list[PromptRow] = []
    for path in paths:
        if path.startswith(INPUTS_PREFIX) and run_dir is None:  # shipped with a job: the run's folder says where
            raise ValueError(f"{path}: a file shipped with a job, read only with the run's folder (run_dir)")
        where = path if run_dir is None else resolve_input(path, run_dir)
        for number, raw in enumerate(read_rows(where), start=1):  # counted from 1, as validation counts them
            rows.append(_to_prompt_row(raw, default_env_class, f"{shown(path)} row {number}", columns))
    return rows


def write_rows(path: str, rows: list[dict[str, Any]]) -> str:
    """Write rows as Parquet or JSONL (by extension). Used for tests and for materialising built-ins."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    if path.endswith(".jsonl"):
        with open(path, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class PromptLoader:
    """Deterministic batches of prompts: epoch ``e`` is a permutation seeded by ``seed + e``.

    The position is a pure function of the step, so a resumed run reads exactly the batches an
    uninterrupted one would (the checkpoint still records it, as SkyRL's ``data.pt`` does).
    """

    def __init__(self, rows: list[PromptRow], batch_size: int, seed: int, shuffle: bool = True):
        if batch_size > len(rows):
            raise ValueError(f"train_batch_size={batch_size} is larger than the dataset ({len(rows)} rows)")
        self.rows = rows
        self.batch_size = batch_size
        self.seed = seed
        self.shuffle = shuffle
        self.steps_per_epoch = len(rows) // batch_size  # drop_last, as SkyRL's train loader

    def _order(self, epoch: int) -> list[int]:
        import numpy as np

        if not self.shuffle:
            return list(range(len(self.rows)))
        return np.random.default_rng(self.seed + epoch).permutation(len(self.rows)).tolist()

    def position(self, step: int) -> dict[str, int]:
        """Where global step ``step`` (1-based) reads: ``{"epoch", "batch_in_epoch"}``."""
        epoch, batch = divmod(step - 1, self.steps_per_epoch)
        return {"epoch": epoch, "batch_in_epoch": batch}

    def batch(self, step: int) -> list[PromptRow]:
        """The prompts of global step ``step`` (1-based)."""
        pos = self.position(step)
        order = self._order(pos["epoch"])
        start = pos["batch_in_epoch"] * self.batch_size
        return [self.rows[i] for i in order[start : start + self.batch_size]]
