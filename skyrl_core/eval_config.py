"""An evaluation job's config: a job config (data, reward, generator, environment, run) plus an ``evaluation`` section.

The eval job reads the same sections a training run does, with the same meaning: ``data.val_data`` (and
``data.columns``) is what it evaluates on, ``reward`` and ``environment`` score it, ``generator.eval_sampling_params``
and ``generator.eval_n_samples_per_prompt`` are how it samples, ``trainer.eval_batch_size``, ``trainer.seed`` and
``trainer.num_threads`` are the in-training eval's, ``run.run_root`` / ``run.run_id`` say where its eval store goes
(``skyrl_core.eval_store``). What only an evaluation has is the ``evaluation`` section: the models, pass@k, the
success threshold and the seed. One YAML holds both, so the config travels in the submission like a run's
(``skyrl_core.submission``)::

    evaluation:
      models: [{name: base, source: builtin://tiny-qwen2, kind: builtin, location: builtin://tiny-qwen2},
               {name: trained, source: my-run, kind: run, location: /runs/my-run, step: 20}]
      pass_at: [1, 4]
    data: {val_data: [builtin://arithmetic/test], ...}
    generator: {eval_n_samples_per_prompt: 4, ...}
    ...

Only pydantic and yaml are imported here.
"""

from __future__ import annotations

import re
import time
import uuid
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from skyrl_core.errors import ConfigError

#: The key of the evaluation section in an eval job's YAML.
SECTION = "evaluation"
#: What a model source is (``models.json``'s ``kind``).
MODEL_KINDS = ("run", "export", "model", "builtin")
#: A model's name: it names its samples file (``eval/samples/<name>.parquet``) and its row of the table.
MODEL_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.@=-]{0,79}$"
_NAME_RE = re.compile(MODEL_NAME_PATTERN)
#: The built-in environments that score a response against the row's ground truth (``reward_spec.ground_truth``).
GROUND_TRUTH_ENVS = ("arithmetic", "gsm8k", "gsm8k_flexible")


class EvalModel(BaseModel):
    """One model of an evaluation: what the user gave (``source``), what it is (``kind``), where the job finds it
    (``location``: a run folder or URL, an export folder or URL, a model directory or ``.gguf`` file, a built-in
    name) and, for a run, which checkpoint (``step``; None: its latest)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=MODEL_NAME_PATTERN)
    source: str
    kind: Literal["run", "export", "model", "builtin"]
    location: str = Field(min_length=1)
    step: int | None = Field(None, ge=0)


class EvaluationSection(BaseModel):
    """The ``evaluation`` section: the models (in the user's order), pass@k, the threshold and the seed.

    ``seed`` is the base seed of the eval's sampling, as ``GeneratorWorker.eval_samples`` takes it; None means the
    seed the run's own in-training eval used at step ``seed_step`` (``step_seed(trainer.seed, seed_step, 1)``), so
    a run's checkpoint evaluated here draws what its eval at that step drew.
    """

    model_config = ConfigDict(extra="forbid")

    models: list[EvalModel] = Field(min_length=1)
    pass_at: list[int] = Field(default_factory=lambda: [1], min_length=1)
    threshold: float = 1.0
    seed: int | None = Field(None, ge=0)
    seed_step: int = Field(0, ge=0)
    n_boot: int = Field(1000, ge=10, le=100_000)
    train_columns: dict[str, str] | None = None
    """``data.columns`` for ``data.train_data`` (what the built-in tiny model is warm-started on) when the evaluated
    data's ``data.columns`` differ from the run's; None: ``data.columns``."""

    def names(self) -> list[str]:
        return [m.name for m in self.models]


def new_eval_id(name: str | None = None) -> str:
    """A fresh eval id: ``<name>-eval-<YYYYmmdd-HHMMSS>-<4 hex>`` (a run id by ``run.run_id``'s rule).

    >>> new_eval_id("my-run")  # doctest: +SKIP
    'my-run-eval-20261203-172500-1a2b'
    """
    stem = re.sub(r"[^A-Za-z0-9_-]+", "-", name or "").strip("-_")[:60].strip("-_") or "models"
    return f"{stem}-eval-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:4]}"


def section_problems(section: EvaluationSection, n: int) -> list[str]:
    """What is wrong with ``section`` for ``n`` samples per prompt, one line each naming the argument."""
    problems = []
    too_big = sorted({k for k in section.pass_at if k > n})
    if too_big:
        problems.append(f"pass_at: {too_big[0]} is larger than n={n} (samples per prompt, "
                        f"generator.eval_n_samples_per_prompt); give pass_at values from 1 to n, or n >= {too_big[-1]}")
    if any(k < 1 for k in section.pass_at):
        problems.append(f"pass_at: {section.pass_at} has a value below 1; give values from 1 to n={n}")
    names = section.names()
    twice = sorted({x for x in names if names.count(x) > 1})
    if twice:
        problems.append(f"models: the name {twice[0]!r} is given twice; each model needs its own name")
    return problems


def read_section(data: Any) -> EvaluationSection:
    """The ``evaluation`` section from a mapping; :class:`ConfigError` with one line per problem (``evaluation.…``)."""
    from skyrl_core.keys import pydantic_problems

    if not isinstance(data, dict):
        raise ConfigError([f"{SECTION}: {type(data).__name__} is not allowed; give a mapping with models, pass_at, ..."])
    try:
        return EvaluationSection.model_validate(data)
    except ValidationError as err:
        raise ConfigError([f"{SECTION}.{line}" for _key, line in pydantic_problems(EvaluationSection, err)]) from None


def split_eval_config(data: dict[str, Any]) -> tuple[dict[str, Any], EvaluationSection]:
    """``(job config mapping, evaluation section)`` of an eval job's config mapping (see the module docstring);
    :class:`ConfigError` when the section is missing or wrong. The job config is left to ``check_config``."""
    if SECTION not in data:
        raise ConfigError([f"{SECTION}: missing; an eval job's config names its models under {SECTION}.models"])
    rest = {k: v for k, v in data.items() if k != SECTION}
    return rest, read_section(data[SECTION])


def eval_config_dict(cfg: Any, section: EvaluationSection) -> dict[str, Any]:
    """The eval job's whole config as one mapping: ``cfg`` (a JobConfig) and the ``evaluation`` section first."""
    return {SECTION: section.model_dump(mode="json"), **cfg.to_dict()}


def eval_config_yaml(cfg: Any, section: EvaluationSection) -> str:
    """:func:`eval_config_dict` as YAML (what travels in the submission)."""
    return yaml.safe_dump(eval_config_dict(cfg, section), sort_keys=False)


def is_model_name(name: Any) -> bool:
    """Whether ``name`` can name a model of an evaluation (``MODEL_NAME_PATTERN``)."""
    return isinstance(name, str) and bool(_NAME_RE.match(name))


def ground_truth_user(functions: list[Any], env_class: str, row_env_class: str | None = None) -> str | None:
    """What scores against the rows' ground truth, in words (``reward 'exact'``, ``the arithmetic environment``), or
    None: a reward function whose ``ground_truth`` parameter has no default, or, with no reward functions, a built-in
    environment of :data:`GROUND_TRUTH_ENVS` (the rows' own ``env_class`` first, else ``env_class``)."""
    import inspect

    for function in functions:
        try:
            param = inspect.signature(function.fn).parameters.get("ground_truth")
        except (TypeError, ValueError):
            continue
        if param is not None and param.default is param.empty:
            return f"reward {function.name!r}"
    env = row_env_class or env_class
    if not functions and env in GROUND_TRUTH_ENVS:
        return f"the {env} environment"
    return None
