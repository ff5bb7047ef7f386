"""The job config: one validated object, keyed by SkyRL's own dotted names.

A config moves between skyrl-nb's engine and SkyRL's trainer unchanged where both support a key.
Load one from a preset, a YAML file or a dict, then apply ``key=value`` overrides::

    >>> from skyrl_nb.config import load_config
    >>> cfg = load_config("quickstart", ["trainer.max_training_steps=20"])
    >>> cfg.trainer.algorithm.advantage_estimator
    'grpo'

Every problem is reported as one line that starts with the dotted key, names the value and says
what is allowed (``ConfigError.problems``). ``config_problems`` (and ``check_config``, which raises) is
the one validation: the engine's ``validate``, ``launch``, the form and ``%skyrl`` all call it, so what
validates launches. Only pydantic and yaml are imported here.

This module is one idea, the config as users load and check it: :class:`JobConfig` and the passes that build one
from a source and overrides (read, merge, validate, check). The parts it stands on live beside it, each importable
on its own: :mod:`skyrl_core.sections` (the schema's sections), :mod:`skyrl_core.presets`, :mod:`skyrl_core.sources`
(reading files and YAML within limits), :mod:`skyrl_core.keys` (dotted keys and pydantic's errors as lines),
:mod:`skyrl_core.checks` (cross-field and file checks) and :mod:`skyrl_core.catalog` (the built-ins).
"""

from __future__ import annotations

import copy
import functools
import os
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError

from skyrl_core.catalog import BUILTIN_DATASETS, BUILTIN_MODELS, BUILTIN_PREFIX
from skyrl_core.checks import _cross_checks, _registry_checks, critic_ranks, local_paths, policy_ranks
from skyrl_core.choices import (
    KLEstimator,
    LossReduction,
    ResumeMode,
    RunState,
    SequenceMaskMetric,
    TISRatioType,
)
from skyrl_core.errors import ConfigError
from skyrl_core.keys import (
    _ABSENT,
    _dotted_get,
    _dotted_table_html,
    _drop_dotted,
    _flatten,
    _leaf_keys,
    _merge_section,
    _optional_section_type,
    _section_type,
    pydantic_problems,
)
from skyrl_core.presets import PRESETS
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    POLICY_LOSSES,
    did_you_mean,
    shown,
)
from skyrl_core.runs import run_dir_of
from skyrl_core.sections import (  # the schema's sections, offered here with JobConfig
    AlgorithmConfig,
    CispoConfig,
    CriticConfig,
    DataConfig,
    DynamicSamplingConfig,
    EnvironmentConfig,
    FSDPConfig,
    FullyAsyncConfig,
    GeneratorConfig,
    InferenceEngineConfig,
    KLControllerConfig,
    LoraConfig,
    MixedPrecisionConfig,
    ModelConfig,
    OffPolicyCorrectionConfig,
    OptimizerConfig,
    OverlongBufferConfig,
    PlacementConfig,
    PolicyConfig,
    RewardConfig,
    RewardFunctionConfig,
    RunConfig,
    SamplingParams,
    TrainerConfig,
    _Section,
)
from skyrl_core.sources import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    _plain_copy,
    _read_yaml_file,
    _safe_yaml,
    _size,
    _too_deep,
    parse_yaml_mapping,
)

__all__ = [
    'JobConfig',
    'ConfigError',
    'load_config',
    'check_config',
    'config_problems',
    'as_config',
    'parse_override',
    'parse_yaml_mapping',
    'preset',
    'PRESETS',
    'all_keys',
    'local_paths',
    'policy_ranks',
    'critic_ranks',
    'BUILTIN_PREFIX',
    'BUILTIN_MODELS',
    'BUILTIN_DATASETS',
    'MAX_PROBLEM_CHARS',
    'KL_ESTIMATORS',
    'LOSS_REDUCTIONS',
    'TIS_RATIO_TYPES',
    'SEQUENCE_MASK_METRICS',
    'RESUME_MODES',
    'RUN_STATES',
    'ASYNC_SWITCHES',
    'ASYNC_TIS_KEY',
    'ASYNC_TIS_DEFAULT',
    'ADVANTAGE_ESTIMATORS',
    'POLICY_LOSSES',
    'AlgorithmConfig',
    'CispoConfig',
    'CriticConfig',
    'DataConfig',
    'DynamicSamplingConfig',
    'EnvironmentConfig',
    'FSDPConfig',
    'FullyAsyncConfig',
    'GeneratorConfig',
    'InferenceEngineConfig',
    'KLControllerConfig',
    'LoraConfig',
    'MixedPrecisionConfig',
    'ModelConfig',
    'OffPolicyCorrectionConfig',
    'OptimizerConfig',
    'OverlongBufferConfig',
    'PlacementConfig',
    'PolicyConfig',
    'RewardConfig',
    'RewardFunctionConfig',
    'RunConfig',
    'SamplingParams',
    'TrainerConfig',
]

# The previous release's tuples of choices, which notebooks read as ``skyrl_nb.config.KL_ESTIMATORS``
# and the like; the enums in skyrl_core.choices are the source.
KL_ESTIMATORS, LOSS_REDUCTIONS = tuple(KLEstimator), tuple(LossReduction)
TIS_RATIO_TYPES, SEQUENCE_MASK_METRICS = tuple(TISRatioType), tuple(SequenceMaskMetric)
RESUME_MODES, RUN_STATES = tuple(ResumeMode), tuple(RunState)


MAX_PROBLEM_CHARS = 300
"""A problem line is at most this long; values in it are shown abbreviated (``registry.shown``)."""


# ---------------------------------------------------------------------------------- data / model


# ---------------------------------------------------------------------------------- algorithm


# ---------------------------------------------------------------------------------- generator


# ---------------------------------------------------------------------------------- the config
class JobConfig(_Section):
    """A whole training job. Sections and key names follow SkyRL (``trainer.algorithm.…``)."""

    data: DataConfig = Field(default_factory=DataConfig)
    trainer: TrainerConfig = Field(default_factory=TrainerConfig)
    generator: GeneratorConfig = Field(default_factory=GeneratorConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    run: RunConfig = Field(default_factory=RunConfig)
    plugins: list[str] = Field(default_factory=list)
    """Modules imported before validation (and in every engine process): they register advantage
    estimators, policy losses and environments (``skyrl_core.registry``)."""

    # -- access ---------------------------------------------------------------------------
    def get(self, key: str) -> Any:
        """The value at a dotted key, e.g. ``cfg.get("trainer.seed")``."""
        node: Any = self
        for part in key.split("."):
            if not isinstance(node, BaseModel) or part not in type(node).model_fields:
                raise ConfigError([_unknown_key_message(key)])
            node = getattr(node, part)
        return node

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def to_dotted(self) -> dict[str, Any]:
        """The config as a flat ``{"trainer.seed": 42, ...}`` mapping."""
        return _flatten(self.to_dict())

    def to_skyrl(self) -> Any:
        """This config as SkyRL's own: a :class:`skyrl_core.skyrl_translate.SkyrlTranslation` holding the dotted
        overrides ``SkyRLTrainConfig.from_cli_overrides`` reads, what changed on the way and why, and the bridge's
        command line. Raises ConfigError (one line per key SkyRL cannot take) when it cannot run on SkyRL.

        >>> load_config("quickstart", ["run.run_id=r1"]).to_skyrl().overrides["trainer.strategy"]
        'fsdp'
        """
        from skyrl_core.skyrl_translate import translate

        return translate(self).check()

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.to_dict(), sort_keys=False)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the config as YAML (atomically) and return the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(self.to_yaml())
        tmp.replace(path)
        return path

    @classmethod
    def from_yaml_text(cls, text: str) -> JobConfig:
        return load_config(parse_yaml_mapping(text, "<yaml>"))

    def with_overrides(self, overrides: list[str] | dict[str, Any]) -> JobConfig:
        """A new validated config with ``key=value`` overrides (or a dotted dict) applied."""
        return load_config(self.to_dict(), overrides)

    # -- checks beyond single fields --------------------------------------------------------
    def problems(self, *, check_files: bool = True) -> list[str]:
        """Cross-field and file-system checks; an empty list means the config can run."""
        return _lines(_cross_checks(self, check_files=check_files))

    def check(self, *, check_files: bool = True) -> JobConfig:
        """Raise ConfigError (one line per problem) unless the config can run; return self."""
        found = self.problems(check_files=check_files)
        if found:
            raise ConfigError(found)
        return self

    # -- derived ----------------------------------------------------------------------------
    @property
    def run_dir(self) -> Path | str | None:
        """``<run.run_root>/<run.run_id>``: a Path for a local root, a URL string for ``s3://...``."""
        if self.run.run_id is None:
            return None
        return run_dir_of(self.run.run_root, self.run.run_id)

    def total_steps(self, train_size: int | None = None) -> int | None:
        """Steps the job will run: ``max_training_steps`` or epochs × batches when the size is known."""
        if self.trainer.max_training_steps is not None:
            return self.trainer.max_training_steps
        if train_size is None:
            return None
        return self.trainer.epochs * max(1, train_size // self.trainer.train_batch_size)

    def __repr__(self) -> str:
        t, g = self.trainer, self.generator
        return (
            f"JobConfig(model={t.policy.model.path!r}, env={self.environment.env_class!r}, "
            f"algorithm={t.algorithm.advantage_estimator}/{t.algorithm.policy_loss_type}, "
            f"batch={t.train_batch_size}x{g.n_samples_per_prompt}, lr={t.policy.optimizer_config.lr:g}, "
            f"steps={t.max_training_steps}, run={self.run.run_id!r})"
        )

    __str__ = __repr__

    def _repr_html_(self) -> str:
        import html

        head = html.escape(repr(self)[len("JobConfig"):])  # noqa: E501
        return f"<details><summary><b>JobConfig</b> {head}</summary>{_dotted_table_html(self.to_dotted())}</details>"


# ---------------------------------------------------------------------------------- presets


def preset(name: str) -> JobConfig:
    """The named preset as a validated config (see ``PRESETS``)."""
    if name not in PRESETS:
        raise ConfigError([f"preset: {name!r} is not a preset; allowed: {', '.join(PRESETS)}"
                           + did_you_mean(name, list(PRESETS))])
    return load_config(copy.deepcopy(PRESETS[name]))


# ---------------------------------------------------------------------------------- loading
def load_config(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
) -> JobConfig:
    """Build a JobConfig whose every key holds an allowed value (cross-field checks: ``check_config``).

    ``source`` is a preset name, a YAML file path, a dict, a JobConfig, or None for defaults;
    ``overrides`` are ``key=value`` strings (values parsed as YAML) or a ``{dotted_key: value}`` dict.
    Raises ConfigError with one line per problem (every problem, not just the first).
    """
    cfg, problems, _bad, _given = _build(source, overrides)
    if problems:
        raise ConfigError(_lines(problems))
    return cfg


def config_problems(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    check_files: bool = True,
) -> tuple[JobConfig | None, list[str]]:
    """Every problem of a config, in one pass: the one validation behind ``python -m skyrl_engine
    validate``, ``launch`` (``prepare_config``), the form and ``%skyrl``.

    ``run_id`` (launch's ``--run-id``) replaces ``run.run_id``. Returns ``(config, problems)``: one line
    per problem, each starting with its key (or ``config:`` / ``plugins:``), showing the value
    abbreviated and what is allowed, at most ``MAX_PROBLEM_CHARS`` long. A key with a bad value stands
    at its default for the checks that follow, and a check that reads it is skipped, so independent
    problems all show and none shows twice. ``config`` is None when it cannot be the config asked for
    (a bad value, an unknown key or name, an unreadable source), else the config, whatever the
    cross-field and file checks say (the form shows its resources while those are fixed).

    >>> cfg, problems = config_problems("quickstart", ["trainer.seed=-1", "trainer.policy.optimizer_config.lr=.inf"])
    >>> cfg, [line.split(":")[0] for line in problems]
    (None, ['trainer.policy.optimizer_config.lr', 'trainer.seed'])
    """
    cfg, problems, bad, given = _build(source, overrides, run_id)
    loaded = not problems
    problems.extend(_cross_checks(cfg, check_files=check_files, skip=bad, only=given))
    return (cfg if loaded else None), _lines(problems)


def check_config(
    source: str | os.PathLike[str] | dict[str, Any] | JobConfig | None = None,
    overrides: list[str] | dict[str, Any] | None = None,
    *,
    run_id: str | None = None,
    check_files: bool = True,
) -> JobConfig:
    """The config, ready to run; ConfigError with every problem (``config_problems``) when it is not.

    >>> check_config("quickstart", ["trainer.max_training_steps=20"]).trainer.max_training_steps
    20
    """
    cfg, problems = config_problems(source, overrides, run_id=run_id, check_files=check_files)
    if problems or cfg is None:
        raise ConfigError(problems)
    return cfg


def as_config(source: JobConfig | dict[str, Any] | None = None) -> JobConfig:
    """A JobConfig from a JobConfig (itself), None (the defaults), a flat ``{"dotted.key": value}`` dict or
    a nested dict: how code that takes "a config" reads any of them with the schema's own defaults.

    >>> as_config({"trainer.placement.colocate_all": False}).trainer.placement.colocate_all
    False
    """
    if isinstance(source, JobConfig):
        return source
    if source is None:
        return load_config(None)
    if any("." in str(key) for key in source):
        return load_config(None, overrides=dict(source))
    return load_config(dict(source))


def parse_override(text: str) -> tuple[str, Any]:
    """Split one ``key=value`` override; the value is parsed as YAML (``3`` → int, ``[a]`` → list).

    Text that is not YAML (or nests absurdly deep) stays text, and the key's type check says so.
    """
    if not isinstance(text, str):
        raise ConfigError([f"config: override {shown(text)} is not a key=value string (e.g. trainer.seed=3)"])
    if "=" not in text:
        raise ConfigError([f"{text}: an override must look like key=value (e.g. trainer.seed=3)"])
    key, raw = text.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError([f"{shown(text)}: the key before '=' is empty"])
    if len(raw) > MAX_CONFIG_BYTES:
        raise ConfigError([f"{key[:100]}: a value of {_size(len(raw))} is not allowed; one override's value is at "
                           f"most {_size(MAX_CONFIG_BYTES)}"])
    value, problem = _safe_yaml(raw) if raw.strip() else ("", None)
    return key, raw if problem else value


# ---------------------------------------------------------------------------------- the passes
def _build(source: Any, overrides: Any,
           run_id: str | None = None) -> tuple[JobConfig, list[str], set[str], set[str] | None]:
    """``(config, problems, bad keys, given)``: the config has every bad or unknown key at its default.

    ``given`` is None when the source was read, else the keys the overrides set: then only checks of
    those keys mean anything (the others would judge the defaults, not the user's config).
    """
    problems: list[str] = []
    base, source_ok = _read_source(source, problems)
    pairs = _parse_overrides(overrides, problems)
    if run_id is not None:
        pairs.append(("run.run_id", run_id))
    for key, value in pairs:
        _set_dotted(base, key, value, problems)
    _async_off_policy_default(base, {key for key, _ in pairs})
    problems.extend(_pop_unknown_keys(base))
    cfg, bad = _validate_tree(base, problems)
    problems.extend(_registry_checks(cfg, skip=bad))
    return cfg, problems, bad, (None if source_ok else {key for key, _ in pairs})


ASYNC_SWITCHES = ("trainer.async_one_step", "trainer.fully_async.enabled")
ASYNC_TIS_KEY = "trainer.algorithm.off_policy_correction.tis_ratio_type"
ASYNC_TIS_DEFAULT = "token"
"""What ``tis_ratio_type`` is when async is on and the config does not say (SkyRL's default is null: off).

The full quickstart from its warm start (``bench/async_parity.py --model-seed 42``, docs/benchmarks.md): one-step
async grpo rose 0.110 +- 0.037 less than sync uncorrected (6 seeds); 0.014 +- 0.018 less with token-level TIS and
0.028 +- 0.019 with sequence-level (24 seeds); gae 0.005 +- 0.022 with token (18 seeds). Token is the default
(sequence until 2026-12-03): ahead of sequence seed by seed on the mean, though within noise, the lower-variance
weight, and SkyRL's usual choice."""


def _async_off_policy_default(tree: dict[str, Any], given: set[str]) -> None:
    """Turn :data:`ASYNC_TIS_DEFAULT` TIS on for an async config that leaves ``tis_ratio_type`` unsaid.

    Unsaid: the key is absent from the source and the overrides, or these overrides switch async on without
    naming it (a saved config holds every key, ``null`` included). An explicit ``null`` stays off.
    """
    if not any(_dotted_get(tree, key) is True for key in ASYNC_SWITCHES) or ASYNC_TIS_KEY in given:
        return
    current = _dotted_get(tree, ASYNC_TIS_KEY)
    switched_now = any(key in given for key in ASYNC_SWITCHES)
    if current is _ABSENT or (current is None and switched_now):
        _set_dotted(tree, ASYNC_TIS_KEY, ASYNC_TIS_DEFAULT, [])


def _read_source(source: Any, problems: list[str]) -> tuple[dict[str, Any], bool]:
    """The source as a nested dict, and whether it could be read (else ``{}`` and a ``config:`` line)."""
    if source is None:
        return {}, True
    if isinstance(source, JobConfig):
        return source.to_dict(), True
    if isinstance(source, dict):
        if _too_deep(source):
            problems.append(f"config: the dict nests deeper than {MAX_CONFIG_DEPTH} levels; a config needs 6")
            return {}, False
        return _plain_copy(source), True  # validation never changes its input
    try:
        text = os.fspath(source)
    except TypeError:
        text = None
    if not isinstance(text, str):
        problems.append(f"config: {shown(source)} is not a preset name, a YAML file, a dict or a JobConfig")
        return {}, False
    if text in PRESETS:
        return copy.deepcopy(PRESETS[text]), True
    try:
        if text.endswith((".yaml", ".yml")) or os.path.sep in text or os.path.lexists(text):
            return _read_yaml_file(text), True
    except ConfigError as err:
        problems.extend(err.problems)
        return {}, False
    problems.append(f"config: {shown(text)} is neither a preset ({', '.join(PRESETS)}) nor a YAML file"
                    + did_you_mean(text, list(PRESETS)))
    return {}, False


def _parse_overrides(overrides: Any, problems: list[str]) -> list[tuple[str, Any]]:
    if not overrides:
        return []
    if isinstance(overrides, dict):
        pairs = []
        for key, value in overrides.items():
            if _too_deep(value):
                problems.append(f"{str(key)[:100]}: the value nests deeper than {MAX_CONFIG_DEPTH} levels; a config "
                                "needs 6")
            else:  # a copy: validation drops bad keys from what it holds, never from the caller's dict
                pairs.append((str(key), _plain_copy(value)))
        return pairs
    if isinstance(overrides, str):
        overrides = [overrides]
    if not isinstance(overrides, (list, tuple)):
        problems.append(f"config: overrides {shown(overrides)} must be a list of key=value strings or a dict")
        return []
    pairs = []
    for item in overrides:
        try:
            pairs.append(parse_override(item))
        except ConfigError as err:
            problems.extend(err.problems)
    return pairs


def _validate_tree(tree: dict[str, Any], problems: list[str]) -> tuple[JobConfig, set[str]]:
    """The config for ``tree``; each bad value is reported (once), dropped to its default, and its key returned."""
    bad: set[str] = set()
    while True:
        try:
            return JobConfig.model_validate(tree), bad
        except ValidationError as err:
            found = [(key, line) for key, line in pydantic_problems(JobConfig, err) if key not in bad]
            if not found:  # nothing left to drop: report what pydantic says and use the defaults
                return JobConfig(), bad
            for key, line in found:
                problems.append(line)
                bad.add(key)
                _drop_dotted(tree, key)


def _lines(problems: list[str]) -> list[str]:
    """Each problem once, on one line of at most ``MAX_PROBLEM_CHARS``."""
    out = []
    for problem in problems:
        line = " ".join(str(problem).split())
        if len(line) > MAX_PROBLEM_CHARS:
            line = line[:MAX_PROBLEM_CHARS - 3] + "..."
        if line not in out:
            out.append(line)
    return out


# ---------------------------------------------------------------------------------- key helpers
def all_keys() -> list[str]:
    """Every valid dotted key (leaves only)."""
    return list(_all_keys())


@functools.lru_cache(maxsize=1)
def _all_keys() -> tuple[str, ...]:
    return tuple(sorted(_leaf_keys(JobConfig)))


def _set_dotted(tree: dict[str, Any], key: str, value: Any, problems: list[str]) -> None:
    model: type[BaseModel] | None = JobConfig
    node = tree
    parts = key.split(".")
    for i, part in enumerate(parts):
        if model is None or part not in model.model_fields:
            problems.append(_unknown_key_message(key))
            return
        annotation = model.model_fields[part].annotation
        sub = _section_type(annotation) or _optional_section_type(annotation)
        if i == len(parts) - 1:
            if sub is not None and not isinstance(value, dict) and not (value is None and sub is not
                                                                        _section_type(annotation)):
                problems.append(f"{key}: is a section, set one of its keys instead "
                                f"(e.g. {key}.{next(iter(sub.model_fields))}=...)")
                return
            if sub is not None and isinstance(value, dict) and isinstance(node.get(part), dict):
                _merge_section(node[part], value, sub)  # a mapping for a section sets the keys it names
            else:
                node[part] = value
            return
        child = node.get(part)
        if not isinstance(child, dict):
            child = {}
            node[part] = child
        node, model = child, sub


def _pop_unknown_keys(tree: dict[str, Any], model: type[BaseModel] = JobConfig, prefix: str = "") -> list[str]:
    """One line per key ``model`` does not have, each removed from ``tree``."""
    found = []
    for name in list(tree):
        key = f"{prefix}{name}"
        if name not in model.model_fields:
            found.append(_unknown_key_message(key))
            del tree[name]
            continue
        sub = _section_type(model.model_fields[name].annotation)
        if sub is not None and isinstance(tree[name], dict):
            found.extend(_pop_unknown_keys(tree[name], sub, f"{key}."))
    return found


def _unknown_key_message(key: str) -> str:
    return f"{key}: unknown key" + did_you_mean(key, _all_keys())



# ---------------------------------------------------------------------------------- checks


