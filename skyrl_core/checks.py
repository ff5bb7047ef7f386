"""The checks no single field can make: keys that contradict or need each other, ranks and micro-batches, LoRA and
async placements, plug-in names, and the files a config names (checked where the job will read them). Each
problem is one line starting with the keys it is about; :func:`skyrl_core.config.config_problems` runs them all.

One idea, the cross-field rules of one config; each rule is a few lines, and there are many.
"""

from __future__ import annotations

import functools
import os
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

from skyrl_core.catalog import BUILTIN_DATASETS, BUILTIN_MODELS, BUILTIN_PREFIX, HF_PREFIX, INPUTS_PREFIX
from skyrl_core.choices import (
    GROUP_ESTIMATORS,
    UNCORRECTED_LOSSES,
    AdvantageEstimator,
    CispoAnchor,
    Engine,
    PolicyLoss,
    ResumeMode,
    Scheduler,
    Strategy,
)
from skyrl_core.registry import (
    ADVANTAGE_ESTIMATORS,
    ENVIRONMENTS,
    POLICY_LOSSES,
    PluginError,
    environment_names,
    load_plugins,
    not_allowed,
    plugin_problems,
    shown,
)
from skyrl_core.runs import run_root_problem
from skyrl_core.sections import AlgorithmConfig, FSDPConfig, OffPolicyCorrectionConfig
from skyrl_core.sources import _file_kind_problem

if typing.TYPE_CHECKING:
    from skyrl_core.config import JobConfig


def _reads_bad(keys: tuple[str, ...], bad: set[str]) -> bool:
    """Whether a check reading ``keys`` (a section covers its keys) reads one that held a bad value."""
    return any(b == k or b.startswith(k + ".") or k.startswith(b + ".") for k in keys for b in bad)


_ENV_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,99}$")


def _registry_checks(cfg: JobConfig, skip: set[str] = frozenset()) -> list[str]:  # type: ignore[assignment]
    """The names open to plug-ins: ``plugins:`` are imported first, then each name must be registered."""
    if "plugins" in skip:
        return []  # its line is there; names its modules register cannot be judged
    try:
        load_plugins(cfg.plugins)
    except PluginError as err:
        return [str(err)]
    a = cfg.trainer.algorithm
    found = [not_allowed(registry.key, value, registry.names())
             for registry, value in ((ADVANTAGE_ESTIMATORS, a.advantage_estimator),
                                     (POLICY_LOSSES, a.policy_loss_type))
             if registry.key not in skip and value not in registry]
    env = cfg.environment.env_class
    envs = environment_names()  # None: no skyrl-gym here, so only the cluster knows its names
    if envs is not None:
        envs = [*envs, *(n for n in cfg.environment.shipped if n not in envs)]  # classes launch shipped
    if "environment.env_class" in skip:
        pass
    elif envs is not None and env not in envs:
        found.append(not_allowed("environment.env_class", env, envs))
    elif envs is None and not _ENV_NAME_RE.match(env):
        found.append(f"environment.env_class: {shown(env)} is not an environment name; use letters, digits, "
                     "'_', '.', ':' or '-' (e.g. gsm8k)")
    # a name only a notebook cell registered: the job's processes never run that cell
    used = ((ADVANTAGE_ESTIMATORS, a.advantage_estimator), (POLICY_LOSSES, a.policy_loss_type), (ENVIRONMENTS, env))
    found.extend(plugin_problems((r, name) for r, name in used if r.key not in skip))
    return found


def _cross_checks(cfg: JobConfig, *, check_files: bool, skip: set[str] = frozenset(),  # type: ignore[assignment]
                  only: set[str] | None = None) -> list[str]:
    """Checks across keys, and of the files and folders keys name.

    A check that reads a key in ``skip`` is skipped; with ``only``, so is one that reads a key not in it.
    """
    t, g, a = cfg.trainer, cfg.generator, cfg.trainer.algorithm
    gae = a.advantage_estimator == AdvantageEstimator.GAE
    checks: list[tuple[tuple[str, ...], Callable[[], list[str]]]] = [
        (("trainer.policy_mini_batch_size", "trainer.train_batch_size"),
         lambda: _mini_batch_problems("policy_mini_batch_size", t.policy_mini_batch_size, t.train_batch_size,
                                      "it must be at most that")),
        (("trainer.micro_train_batch_size_per_gpu", "trainer.policy_mini_batch_size", "generator.n_samples_per_prompt"),
         lambda: _micro_batch_problems(cfg)),
        (("trainer.algorithm.advantage_estimator", "generator.n_samples_per_prompt"),
         lambda: [f"generator.n_samples_per_prompt: 1 gives {a.advantage_estimator} no group to compare within; "
                  "use at least 2"] if a.advantage_estimator in GROUP_ESTIMATORS and g.n_samples_per_prompt < 2 else []),
        (("trainer.algorithm.advantage_estimator", "trainer.critic_mini_batch_size", "trainer.train_batch_size",
          "generator.n_samples_per_prompt", "trainer.micro_train_batch_size_per_gpu"),
         lambda: _critic_checks(cfg) if gae else []),
        (("trainer.resume_mode", "trainer.resume_path"),
         lambda: [f"trainer.resume_path: {shown(t.resume_path)} is not allowed when trainer.resume_mode=from_path; "
                  "give the global_step_N directory to resume from"]
         if t.resume_mode == "from_path" and not t.resume_path else []),
        (("trainer.algorithm.use_kl_loss", "trainer.algorithm.use_kl_in_reward"),
         lambda: ["trainer.algorithm.use_kl_in_reward: true together with use_kl_loss=true counts KL twice; "
                  "turn one off"] if a.use_kl_loss and a.use_kl_in_reward else []),
        (("trainer.algorithm.dynamic_sampling.type", "trainer.algorithm.advantage_estimator"),
         lambda: [f"trainer.algorithm.dynamic_sampling.type: {a.dynamic_sampling.type!r} needs a group estimator "
                  f"({', '.join(sorted(GROUP_ESTIMATORS))}), not {a.advantage_estimator!r}"]
         if a.dynamic_sampling.type is not None and a.advantage_estimator not in GROUP_ESTIMATORS else []),
        (("trainer.algorithm.overlong_buffer.len", "generator.sampling_params.max_generate_length"),
         lambda: [f"trainer.algorithm.overlong_buffer.len: {a.overlong_buffer.len} must be smaller than "
                  f"generator.sampling_params.max_generate_length={g.sampling_params.max_generate_length}"]
         if a.overlong_buffer.len and a.overlong_buffer.len >= g.sampling_params.max_generate_length else []),
        (("trainer.algorithm.off_policy_correction",), lambda: _off_policy_checks(a.off_policy_correction)),
        (("trainer.algorithm.off_policy_correction", "trainer.algorithm.policy_loss_type",
          "trainer.algorithm.cispo.cispo_anchor"), lambda: _loss_correction_problems(a)),
        (("data.train_data",),
         lambda: [] if cfg.data.train_data else ["data.train_data: [] is empty; give at least one Parquet/JSONL file"]),
        (("trainer.async_one_step", "trainer.fully_async.enabled"),
         lambda: ["trainer.fully_async.enabled: true is not allowed together with trainer.async_one_step=true (two "
                  "schedules at once); allowed: one of them (fully async with max_staleness_steps=1 is one-step)"]
         if t.async_one_step and t.fully_async.enabled else []),
        (("trainer.async_one_step", "trainer.fully_async.enabled", "trainer.placement.colocate_all"),
         lambda: _async_placement_problems(cfg)),
        (("trainer.placement", "trainer.policy_mini_batch_size", "trainer.critic_mini_batch_size",
          "generator.n_samples_per_prompt", "trainer.strategy", "trainer.policy.fsdp_config",
          "trainer.critic.fsdp_config", "trainer.algorithm.advantage_estimator"),
         lambda: _rank_problems(cfg)),
        (("trainer.policy.fsdp_config.wrap_policy",), lambda: _wrap_policy_problems("policy", t.policy.fsdp_config)),
        (("trainer.critic.fsdp_config.wrap_policy",), lambda: _wrap_policy_problems("critic", t.critic.fsdp_config)),
        (("trainer.policy.model.lora", "trainer.critic.model.lora", "trainer.placement",
          "trainer.algorithm.advantage_estimator"), lambda: _lora_problems(cfg)),
        (("data.train_data", "data.columns"),
         lambda: _data_file_problems("train_data", cfg.data.train_data, check_files, cfg.data.columns)),
        (("data.val_data", "data.columns"),
         lambda: _data_file_problems("val_data", cfg.data.val_data, check_files, cfg.data.columns)),
        (("reward.functions",), lambda: _reward_function_problems(cfg.reward.functions)),
        (("reward.functions", "generator.max_turns"),
         lambda: [f"reward.functions: reward functions score one answer; generator.max_turns={g.max_turns} plays "
                  "episodes that an environment scores (environment.env_class); allowed: max_turns 1 with reward "
                  "functions"] if cfg.reward.functions and g.max_turns > 1 else []),
        (("trainer.policy.model.path",),
         lambda: _model_path_problems("trainer.policy.model.path", t.policy.model.path, check_files)),
        (("trainer.critic.model.path", "trainer.algorithm.advantage_estimator"),  # the same path as the policy's is fine
         lambda: _model_path_problems("trainer.critic.model.path", t.critic.model.path, check_files)
         if gae and t.critic.model.path != t.policy.model.path and t.critic.model.path is not None else []),
        (("run.run_root",), lambda: _listed(run_root_problem(cfg.run.run_root, check_files=check_files))),
        (("trainer.ckpt_path",),
         lambda: _listed(None if t.ckpt_path is None
                         else run_root_problem(t.ckpt_path, key="trainer.ckpt_path", check_files=check_files))),
        (("trainer.resume_mode", "trainer.resume_path"), lambda: _resume_path_problems(cfg, check_files)),
        (("run.engine",), lambda: _skyrl_engine_problems(cfg)),
    ]
    found: list[str] = []
    for keys, check in checks:
        if _reads_bad(keys, skip) or (only is not None and not all(_reads_bad((k,), only) for k in keys)):
            continue
        found.extend(check())
    named = {line.split(":", 1)[0] for line in found}  # a key already named (an inverted band) is named once
    for key, modes, needs, is_on in _MODE_KEYS:
        keys = (key, *modes)
        if key in named or _reads_bad(keys, skip) or (only is not None and not all(_reads_bad((k,), only) for k in keys)):
            continue
        found.extend(_orphan_problem(cfg, key, needs, is_on))
    return found


_OPC = "trainer.algorithm.off_policy_correction"


_ALGO = "trainer.algorithm"


_Rule = tuple[str, tuple[str, ...], str, Callable[[Callable[[str], Any]], bool]]


_MODE_KEYS: tuple[_Rule, ...] = (
    (f"{_OPC}.token_tis_ratio_clip_high", (f"{_OPC}.tis_ratio_type",), f"{_OPC}.tis_ratio_type=token",
     lambda get: get(f"{_OPC}.tis_ratio_type") == "token"),
    (f"{_OPC}.sequence_tis_ratio_clip_high", (f"{_OPC}.tis_ratio_type",), f"{_OPC}.tis_ratio_type=sequence",
     lambda get: get(f"{_OPC}.tis_ratio_type") == "sequence"),
    *((f"{_OPC}.{band}_mask_{end}", (f"{_OPC}.sequence_mask_metric",), f"{_OPC}.sequence_mask_metric={metric}",
       lambda get, metric=metric: get(f"{_OPC}.sequence_mask_metric") == metric)
      for band, metric in (("geo", "geometric"), ("product", "product")) for end in ("low", "high")),
    *((f"{_OPC}.token_mask_is_threshold_{end}", (f"{_OPC}.token_mask_is_threshold_{other}",),
       f"{_OPC}.token_mask_is_threshold_{other} is set too (the token mask needs both ends)",
       lambda get, other=other: get(f"{_OPC}.token_mask_is_threshold_{other}") is not None)
      for end, other in (("low", "high"), ("high", "low"))),
    (f"{_ALGO}.dynamic_sampling.max_sample_batches", (f"{_ALGO}.dynamic_sampling.type",),
     f"{_ALGO}.dynamic_sampling.type is filter or replace", lambda get: get(f"{_ALGO}.dynamic_sampling.type") is not None),
    (f"{_ALGO}.dynamic_sampling.min_replace_ratio", (f"{_ALGO}.dynamic_sampling.type",),
     f"{_ALGO}.dynamic_sampling.type=replace", lambda get: get(f"{_ALGO}.dynamic_sampling.type") == "replace"),
    (f"{_ALGO}.overlong_buffer.penalty_factor", (f"{_ALGO}.overlong_buffer.len",), f"{_ALGO}.overlong_buffer.len > 0",
     lambda get: get(f"{_ALGO}.overlong_buffer.len") > 0),
    *((f"{_ALGO}.{name}", (f"{_ALGO}.use_kl_loss", f"{_ALGO}.use_kl_in_reward"),
       f"{_ALGO}.use_kl_loss=true or use_kl_in_reward=true",
       lambda get: get(f"{_ALGO}.use_kl_loss") or get(f"{_ALGO}.use_kl_in_reward"))
      for name in ("kl_loss_coef", "kl_estimator_type")),
    *((f"{_ALGO}.kl_ctrl.{name}", (f"{_ALGO}.use_kl_in_reward",), f"{_ALGO}.use_kl_in_reward=true",
       lambda get: get(f"{_ALGO}.use_kl_in_reward")) for name in ("type", "kl_target", "horizon")),
    (f"{_ALGO}.entropy_loss_coef", (f"{_ALGO}.use_entropy_loss",), f"{_ALGO}.use_entropy_loss=true",
     lambda get: get(f"{_ALGO}.use_entropy_loss")),
    ("trainer.fully_async.max_staleness_steps", ("trainer.fully_async.enabled",), "trainer.fully_async.enabled=true",
     lambda get: get("trainer.fully_async.enabled")),
    *((f"trainer.{role}.model.lora.{name}", (f"trainer.{role}.model.lora.rank",), f"trainer.{role}.model.lora.rank > 0",
       lambda get, role=role: get(f"trainer.{role}.model.lora.rank") > 0)
      for role in ("policy", "critic") for name in ("alpha", "dropout", "target_modules", "exclude_modules",
                                                    "init_method")),
    *((f"trainer.{role}.optimizer_config.num_warmup_steps", (f"trainer.{role}.optimizer_config.scheduler",),
       f"trainer.{role}.optimizer_config.scheduler is not constant",
       lambda get, role=role: get(f"trainer.{role}.optimizer_config.scheduler") != Scheduler.CONSTANT)
      for role in ("policy", "critic")),
)
"""Keys that one mode alone reads: ``(key, the keys that switch the mode, the mode in words, whether it is
on)``. Set away from its default while its mode is off, such a key would be silently ignored, so it is refused
(``_orphan_problem``). Keys a plug-in may read (an estimator's ``gamma``, a loss's ``clip_ratio_c``) are not
here: only the engine's own modes are known."""


def _orphan_problem(cfg: JobConfig, key: str, needs: str, is_on: Callable[[Callable[[str], Any]], bool]) -> list[str]:
    """One line when ``key`` differs from its default while the mode that reads it (``needs``) is off."""
    def get(dotted: str) -> Any:  # the keys are the schema's own: no lookup checks needed
        return functools.reduce(getattr, dotted.split("."), cfg)

    if is_on(get):
        return []
    *section, leaf = key.split(".")
    owner: Any = get(".".join(section))
    default = type(owner).model_fields[leaf].get_default(call_default_factory=True)
    value = getattr(owner, leaf)
    if value == default:
        return []
    said = "null" if default is None else shown(default)
    return [f"{key}: {shown(value)} is ignored unless {needs}; set that, or leave {leaf} at its default {said}"]


def _skyrl_engine_problems(cfg: JobConfig) -> list[str]:
    """With ``run.engine=skyrl``: what SkyRL's trainer cannot take (``skyrl_core.skyrl_translate``)."""
    if cfg.run.engine != Engine.SKYRL:
        return []
    from skyrl_core.skyrl_translate import translate

    return translate(cfg).problems


def _listed(problem: str | None) -> list[str]:
    return [] if problem is None else [problem]


def _micro_batch_problems(cfg: JobConfig) -> list[str]:
    t, g = cfg.trainer, cfg.generator
    samples = t.policy_mini_batch_size * g.n_samples_per_prompt
    micro = t.micro_train_batch_size_per_gpu
    if micro > samples:
        return [f"trainer.micro_train_batch_size_per_gpu: {micro} is larger than one mini-batch "
                f"({t.policy_mini_batch_size} prompts x {g.n_samples_per_prompt} samples = {samples})"]
    if samples % micro:
        return [f"trainer.micro_train_batch_size_per_gpu: {micro} does not divide one mini-batch of "
                f"{samples} samples (policy_mini_batch_size x n_samples_per_prompt)"]
    return []


def policy_ranks(cfg: JobConfig) -> int:
    """How many policy workers train together: ``policy_num_nodes × policy_num_gpus_per_node`` (at least 1)."""
    p = cfg.trainer.placement
    return max(1, p.policy_num_nodes * p.policy_num_gpus_per_node)


def critic_ranks(cfg: JobConfig) -> int:
    """How many critic workers train together (gae only, else 0): ``critic_num_nodes × critic_num_gpus_per_node``."""
    from skyrl_core.choices import AdvantageEstimator

    if cfg.trainer.algorithm.advantage_estimator != AdvantageEstimator.GAE:
        return 0
    p = cfg.trainer.placement
    return max(1, p.critic_num_nodes * p.critic_num_gpus_per_node)


def _rank_problems(cfg: JobConfig) -> list[str]:
    """What a policy (or critic) on several ranks needs: rows that split evenly, the critic on the policy's
    bundles, fsdp_config values this engine builds."""
    t, g, p = cfg.trainer, cfg.generator, cfg.trainer.placement
    found = []
    roles = [("policy", policy_ranks(cfg), t.policy_mini_batch_size, t.policy.fsdp_config, True),
             ("critic", max(1, p.critic_num_nodes * p.critic_num_gpus_per_node), t.critic_mini_batch_size,
              t.critic.fsdp_config, critic_ranks(cfg) > 0)]
    for role, ranks, mini, fsdp, active in roles:
        where = f"{ranks} {role} rank{'s' if ranks != 1 else ''} (trainer.placement.{role}_num_nodes × {role}_num_gpus_per_node)"
        rows = mini * g.n_samples_per_prompt
        if active and ranks > 1 and rows % ranks:
            found.append(f"trainer.{role}_mini_batch_size: {mini} prompts × {g.n_samples_per_prompt} samples = "
                         f"{rows} rows do not split evenly across {where}; allowed: a multiple of {ranks} rows")
        key = f"trainer.{role}.fsdp_config"
        if fsdp.fsdp_size not in (-1, ranks):
            found.append(f"{key}.fsdp_size: {fsdp.fsdp_size} is not allowed (hybrid sharding is not built); "
                         f"allowed: -1 or {ranks} (every rank)")
        sharded = ranks > 1 and t.strategy == Strategy.FSDP2
        wrap_keys = (("cpu_offload", fsdp.cpu_offload, False), ("mixed_precision", fsdp.mixed_precision, None))
        for name, value, default in wrap_keys if active else ():
            if value != default and not sharded:
                why = "trainer.strategy=ddp" if ranks > 1 else f"{where} (a single worker is not wrapped)"
                found.append(f"{key}.{name}: {value!r} applies to fsdp2 on several ranks, not to {why}; "
                             f"allowed: {default!r}")
    if critic_ranks(cfg) > 1 and (p.critic_num_nodes, p.critic_num_gpus_per_node) != (p.policy_num_nodes,
                                                                                     p.policy_num_gpus_per_node):
        found.append(f"trainer.placement.critic_num_nodes × critic_num_gpus_per_node: {p.critic_num_nodes} × "
                     f"{p.critic_num_gpus_per_node} is not allowed; the critic's ranks share the policy's bundles, "
                     f"allowed: 1 × 1 or the policy's {p.policy_num_nodes} × {p.policy_num_gpus_per_node}")
    return found


def _wrap_policy_problems(role: str, fsdp: FSDPConfig) -> list[str]:
    if not fsdp.wrap_policy:
        return []
    return [f"trainer.{role}.fsdp_config.wrap_policy: {fsdp.wrap_policy!r} is not allowed (each decoder layer is one "
            "FSDP2 unit); allowed: {}"]


def _lora_problems(cfg: JobConfig) -> list[str]:
    """LoRA trains the policy on one worker: not the critic, not a policy on several ranks."""
    t = cfg.trainer
    lora = t.policy.model.lora
    found = []
    if lora.rank and policy_ranks(cfg) > 1:
        found.append(f"trainer.policy.model.lora.rank: {lora.rank} with {policy_ranks(cfg)} policy ranks is not built "
                     "(LoRA trains on one policy worker); allowed: 0, or trainer.placement.policy_num_nodes × "
                     "policy_num_gpus_per_node = 1")
    if lora.rank and isinstance(lora.target_modules, list) and not lora.target_modules:
        found.append("trainer.policy.model.lora.target_modules: [] names no module; give module names such as "
                     "[q_proj, v_proj] or 'all-linear'")
    if t.critic.model.lora.rank and critic_ranks(cfg):
        found.append(f"trainer.critic.model.lora.rank: {t.critic.model.lora.rank} is not built (LoRA trains the "
                     "policy only); allowed: 0")
    return found


def _async_placement_problems(cfg: JobConfig) -> list[str]:
    t = cfg.trainer
    if not ((t.async_one_step or t.fully_async.enabled) and t.placement.colocate_all):
        return []
    which = "trainer.fully_async.enabled" if t.fully_async.enabled else "trainer.async_one_step"
    return [f"trainer.placement.colocate_all: true is not allowed with {which}=true (generation "
            "overlaps training, so they need their own devices); allowed: false"]


def _off_policy_checks(c: OffPolicyCorrectionConfig) -> list[str]:
    """Each band of ``off_policy_correction`` must have its low end below its high end."""
    key = "trainer.algorithm.off_policy_correction"
    found = []
    for low, high in (("geo_mask_low", "geo_mask_high"), ("product_mask_low", "product_mask_high"),
                      ("outlier_token_is_threshold_low", "outlier_token_is_threshold_high"),
                      ("token_mask_is_threshold_low", "token_mask_is_threshold_high")):
        lo, hi = getattr(c, low), getattr(c, high)
        if lo is not None and hi is not None and lo >= hi:
            found.append(f"{key}.{low}: {lo} is not below {high}={hi}; it must be smaller")
    return found


def _loss_correction_problems(a: AlgorithmConfig) -> list[str]:
    """An off-policy correction the loss would ignore, or apply twice (CISPO anchored on the sampler's log-probs)."""
    c, key = a.off_policy_correction, "trainer.algorithm.off_policy_correction"
    on = [f"{name}: {value}" for name, value in (
        ("tis_ratio_type", c.tis_ratio_type), ("sequence_mask_metric", c.sequence_mask_metric),
        ("outlier_token_is_threshold_low", c.outlier_token_is_threshold_low),
        ("outlier_token_is_threshold_high", c.outlier_token_is_threshold_high),
        ("token_mask_is_threshold_low", c.token_mask_is_threshold_low if c.token_mask_is_threshold_high is not None
         else None)) if value is not None]
    if on and a.policy_loss_type in UNCORRECTED_LOSSES:
        return [f"{key}.{on[0]} is not allowed with policy_loss_type={a.policy_loss_type}: that loss takes no "
                f"off-policy correction (SkyRL's neither); allowed: every correction off (null)"]
    if (a.policy_loss_type == PolicyLoss.CISPO and a.cispo.cispo_anchor == CispoAnchor.ROLLOUT
            and c.tis_ratio_type is not None):
        return [f"{key}.tis_ratio_type: {c.tis_ratio_type} is not allowed with cispo.cispo_anchor=rollout: CISPO's "
                "ratio is against the sampler's log-probs, the correction already; allowed: null, or cispo_anchor old"]
    return []


def _mini_batch_problems(name: str, mini: int, train_batch_size: int, bound_note: str) -> list[str]:
    """``trainer.<name>`` must be at most ``trainer.train_batch_size`` and divide it."""
    if mini > train_batch_size:
        return [f"trainer.{name}: {mini} is larger than trainer.train_batch_size={train_batch_size}; {bound_note}"]
    if train_batch_size % mini:
        return [f"trainer.train_batch_size: {train_batch_size} is not a multiple of trainer.{name}={mini}"]
    return []


def _critic_checks(cfg: JobConfig) -> list[str]:
    """What ``gae`` (a critic) needs of the batch sizes."""
    t, g = cfg.trainer, cfg.generator
    found = _mini_batch_problems("critic_mini_batch_size", t.critic_mini_batch_size, t.train_batch_size,
                                 "gae's critic needs it at most that")
    samples = t.critic_mini_batch_size * g.n_samples_per_prompt
    if not found and samples % min(t.micro_train_batch_size_per_gpu, samples):
        found.append(f"trainer.micro_train_batch_size_per_gpu: {t.micro_train_batch_size_per_gpu} does not divide "
                     f"one critic mini-batch of {samples} samples")
    return found


def local_paths(cfg: JobConfig) -> dict[str, list[str]]:
    """The files and folders on a disk that ``cfg`` reads, by key: models and data that are neither built in
    nor URLs, and ``trainer.resume_path`` when resuming from a path. The job reads them where it runs, so on a
    cluster that shares no disk with the notebook they are checked there (``Cluster.launch``)."""
    t = cfg.trainer
    found: dict[str, list[str]] = {}
    models = [("trainer.policy.model.path", t.policy.model.path)]
    if t.algorithm.advantage_estimator == AdvantageEstimator.GAE:
        models.append(("trainer.critic.model.path", t.critic.model.path))
    for key, value in models:
        if value and not value.startswith(BUILTIN_PREFIX) and "://" not in value:
            found[key] = [value]
    for key in ("train_data", "val_data"):
        items = [i for i in getattr(cfg.data, key) if not i.startswith(BUILTIN_PREFIX) and "://" not in i]
        if items:
            found[f"data.{key}"] = items
    if t.resume_mode == ResumeMode.FROM_PATH and t.resume_path and "://" not in t.resume_path:
        found["trainer.resume_path"] = [t.resume_path]
    return found


def _reward_function_problems(functions: list[Any]) -> list[str]:
    """``reward.functions``: names once each, not one of skyrl-nb's own series, and each ``file`` a shipped
    ``inputs://`` file or ``module:function``."""
    from skyrl_core.reward_functions import RESERVED_NAMES

    found, seen = [], set()
    for i, function in enumerate(functions):
        key = f"reward.functions[{i}]"
        if function.name in seen or function.name in RESERVED_NAMES:
            found.append(f"{key}.name: {function.name!r} is taken (by another function, or by skyrl-nb's own "
                         f"reward/{function.name}); give another name")
        seen.add(function.name)
        where = function.file
        if not where.startswith(INPUTS_PREFIX) and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", where):
            found.append(f"{key}.file: {shown(where)} is neither a shipped function ({INPUTS_PREFIX}...) nor "
                         "module:function")
    return found


def _local_path(text: str) -> Path | None:
    """``text`` as a local path (``~`` expanded), None when no file can have that name (a NUL byte)."""
    return None if "\x00" in text else Path(os.path.expanduser(text))


def _data_file_problems(key: str, items: list[str], check_files: bool,
                        columns: dict[str, str] | None = None) -> list[str]:
    from skyrl_core.datarows import SUFFIXES, data_file_problems
    from skyrl_core.store import url_problem

    found = []
    for item in items:
        if item.startswith(BUILTIN_PREFIX):
            if item not in BUILTIN_DATASETS:
                found.append(f"data.{key}: {shown(item)} is not a built-in dataset; allowed: "
                             f"{', '.join(BUILTIN_DATASETS)}")
            continue
        if item.startswith(INPUTS_PREFIX):
            continue  # data launch() shipped into the run's own folder (skyrl_core.user_inputs)
        if item.startswith(HF_PREFIX):
            found.append(f"data.{key}: {shown(item)} is a Hugging Face dataset, which launch() reads in the notebook "
                         "and ships with the job; launch the config with cluster.launch or %skyrl launch")
            continue
        if "://" in item:
            problem = url_problem(item, f"data.{key}", check_files=check_files)
            if problem:
                found.append(problem)
            elif not item.endswith(SUFFIXES):
                found.append(f"data.{key}: {shown(item)} has no suffix of {', '.join(SUFFIXES)}")
            elif check_files:
                found.extend(data_file_problems(f"data.{key}", item, columns=columns))
            continue
        path = _local_path(item)
        if not check_files:
            continue
        # a folder, a FIFO, a symlink loop: named as what it is (never opened), not "does not exist"
        problem = _file_kind_problem(item if path is None else str(path), shown(item), "a .parquet/.jsonl/.json file")
        if problem or path is None:
            found.append(f"data.{key}: {problem}")
        elif path.suffix not in (".parquet", ".jsonl", ".json"):
            found.append(f"data.{key}: {shown(item)} has suffix {path.suffix!r}; allowed: .parquet, .jsonl, .json")
        else:  # the first rows, read where the data is, in the shape the engine's loader needs
            found.extend(data_file_problems(f"data.{key}", str(path), columns=columns))
    return found


def _model_path_problems(key: str, model: str | None, check_files: bool) -> list[str]:
    """A model key names a built-in model, a local Hugging Face directory or a local ``.gguf`` file (the cluster
    downloads nothing from a model hub)."""
    if not model:
        return [f"{key}: {shown(model)} is not allowed; give a local Hugging Face model directory or "
                f"{BUILTIN_MODELS[0]}"]
    if model.startswith(BUILTIN_PREFIX):
        if model not in BUILTIN_MODELS:
            return [f"{key}: {shown(model)} is not a built-in model; allowed: {', '.join(BUILTIN_MODELS)}"]
        return []
    path = _local_path(model)
    if check_files and model.endswith(".gguf"):
        return [] if path is not None and path.is_file() else [f"{key}: {shown(model)} is not a file"]
    if check_files and (path is None or not (path / "config.json").is_file()):
        return [f"{key}: {shown(model)} is not a local Hugging Face model directory (no config.json there) or "
                ".gguf file; models cannot be downloaded on the cluster"]
    return []


def _resume_path_problems(cfg: JobConfig, check_files: bool) -> list[str]:
    resume = cfg.trainer.resume_path
    if not check_files or cfg.trainer.resume_mode != "from_path" or not resume:
        return []
    from skyrl_core.store import is_url

    if is_url(resume):
        return []  # the engine downloads it; its files are checked there
    path = _local_path(resume)
    if path is None or not path.is_dir():
        return [f"trainer.resume_path: {shown(resume)} is not a directory"]
    return []
