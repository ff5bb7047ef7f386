"""A JobConfig as SkyRL's own config: the dotted overrides ``SkyRLTrainConfig.from_cli_overrides`` reads.

``run.engine: skyrl`` runs SkyRL's trainer (``skyrl.train``) instead of this project's engine, through
``python -m skyrl_engine.skyrl_bridge``. The keys are SkyRL's already, so most values pass through unchanged;
:func:`translate` says where that is not so:

- ``changed``: keys SkyRL receives with another value than skyrl-nb holds (``trainer.strategy`` fsdp2 is
  SkyRL's ``fsdp``, the torch sampler becomes vLLM, ...) and keys only SkyRL has that the translation sets
  (``trainer.export_path``, ``trainer.run_name``, ...), each with the reason;
- ``not_sent``: skyrl-nb keys SkyRL has no counterpart for whose value does not change what is trained
  (``run.*`` and ``data.columns`` become the bridge's own arguments, ``trainer.num_threads`` tunes CPU threads,
  ``reward.*`` become the settings of the bridge's environment), with the reason;
- ``problems``: everything SkyRL's trainer cannot take, one line per key naming its value and what is
  allowed; a key only skyrl-nb has, set to anything but its default, is refused here rather than dropped.

A job's own data and reward functions (``skyrl_core.user_inputs``: ``inputs://`` files shipped into the run
folder, object-store URLs, ``data.columns``) are read by the bridge, which writes them as Parquet in SkyRL's row
layout before SkyRL starts; environment classes shipped from a cell (``environment.shipped``) it registers with
skyrl-gym. With ``reward.functions``, ``environment.env_class`` becomes :data:`REWARD_ENV`, the
bridge's skyrl-gym environment (``skyrl_engine.skyrl_reward_env``) that scores each response with the weighted
functions, and the ``reward.*`` settings are sent as its own, ``environment.skyrl_gym.skyrl_nb_reward.*`` (keys the
bridge's config class adds to SkyRL's).

Releases (:data:`SUPPORTED`): the translation is written for SkyRL 0.4 (:data:`SKYRL_VERSION`, the current
release) and keeps 0.3, which differs in one key here: 0.3 has no ``trainer.algorithm.cispo.cispo_anchor``
(:data:`LACKING`), so for 0.3 that key is not sent at its default and refused otherwise. ``translate(cfg, version)``
takes the release the cluster's probe found (``skyrl_core.packages``); the bridge, which sees the installed
release itself, drops or refuses the same keys (:func:`adapt_to_release`) when the translation was made for another.

``DEFAULT_DIFFERENCES`` lists where skyrl-nb's defaults differ from SkyRL's (docs/config.md), so the same
YAML run by SkyRL's own entrypoint is known to mean something else there. Only pydantic and yaml are
imported (this module is part of the contracts); the tests check every translated key against SkyRL's
config object in SkyRL's own environment, one per release (tests/skyrl_bridge). One idea, hence the length: skyrl-nb's
config as SkyRL's, key by key, with every difference stated.

>>> from skyrl_core.config import load_config
>>> t = load_config("quickstart", ["run.run_id=demo", "run.run_root=/runs"]).to_skyrl()
>>> t.overrides["generator.inference_engine.backend"], t.overrides["trainer.ckpt_path"]
('vllm', '/runs/demo/checkpoints')
>>> "trainer.algorithm.cispo.cispo_anchor" in translate(load_config("quickstart"), "0.3.0").not_sent
True
"""

from __future__ import annotations

import functools
import html
import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import yaml

from skyrl_core.choices import ROLLOUT_LOSSES, AdvantageEstimator, Backend, Strategy
from skyrl_core.errors import ConfigError
from skyrl_core.store import is_url, join

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

SKYRL_VERSION = "0.4.0"
"""The SkyRL release the translation is written for (the current one); :data:`SUPPORTED` lists every release kept."""
SUPPORTED = ("0.3", "0.4")
"""The SkyRL releases (major.minor, any patch) the translation and the bridge take; tests/skyrl_bridge checks each
against SkyRL itself (0.3.0 and 0.4.0)."""
LACKING: dict[str, dict[str, tuple[Any, str]]] = {
    "0.3": {"trainer.algorithm.cispo.cispo_anchor": (
        "old", "SkyRL 0.3 has no cispo_anchor: its CISPO ratio is against the pre-update log-probs ('old')")},
}
"""Keys a release lacks that the translation for :data:`SKYRL_VERSION` sends: release -> key -> (the value that means
the same as leaving the key out, why). Not sent at that value; refused at any other."""
BRIDGE_MODULE = "skyrl_engine.skyrl_bridge"
"""The module a SkyRL job runs: ``python -m skyrl_engine.skyrl_bridge --run-dir DIR key=value ...``."""
OVERLONG_KEYS = ("trainer.algorithm.overlong_buffer.len", "trainer.algorithm.overlong_buffer.penalty_factor")
"""DAPO's soft overlong penalty: not in SkyRL's core config (0.3, 0.4); the bridge's config class adds these keys
(as SkyRL's DAPO example does) and its trainer applies the penalty, so they are sent only when it is on."""
REWARD_ENV = "skyrl_nb_reward"
"""The skyrl-gym environment (``skyrl_engine.skyrl_reward_env``) through which ``reward.functions`` score SkyRL's
samples; its settings are SkyRL's ``environment.skyrl_gym.<REWARD_ENV>.*`` (keys the bridge's config class adds)."""
REWARD_ENV_KEY = f"environment.skyrl_gym.{REWARD_ENV}"
TEXT_PROMPT_COLUMN = "skyrl_nb_text_prompt"
"""A column of the rows the bridge writes for :data:`REWARD_ENV`: true where the row's prompt was text (its one user
message), so the reward functions receive the text as the row gave it, as skyrl-nb's engine hands it to them."""


@dataclass(frozen=True)
class Change:
    """One key SkyRL receives with a value that is not skyrl-nb's own (``ours`` None and ``only_skyrl`` True:
    a key skyrl-nb does not have, set by the translation)."""

    key: str
    ours: Any
    sent: Any
    why: str
    only_skyrl: bool = False

    def __str__(self) -> str:
        was = "(SkyRL's key only)" if self.only_skyrl else f"skyrl-nb {self.ours!r}"
        return f"{self.key}={skyrl_value(self.sent)}  [{was}: {self.why}]"


@dataclass(frozen=True)
class DefaultDifference:
    """A key whose default differs between skyrl-nb and SkyRL (:data:`SKYRL_VERSION`; ``only`` names the release it
    applies to when it is not every one)."""

    key: str
    skyrl_nb: Any
    skyrl: Any
    why: str
    only: str | None = None


DEFAULT_DIFFERENCES: tuple[DefaultDifference, ...] = (
    DefaultDifference("data.train_data", ["builtin://arithmetic/train"], ["~/data/gsm8k/train.parquet"],
                      "no data set can be downloaded on the cluster; the built-in task always exists"),
    DefaultDifference("data.val_data", ["builtin://arithmetic/test"], ["~/data/gsm8k/validation.parquet"],
                      "as data.train_data"),
    DefaultDifference("trainer.strategy", "fsdp2", "fsdp",
                      "the same FSDP2 sharding; SkyRL (since 0.3) calls it 'fsdp' and renames 'fsdp2'"),
    DefaultDifference("trainer.policy.model.path", None, "Qwen/Qwen2.5-1.5B-Instruct",
                      "models cannot be downloaded on the cluster: skyrl-nb asks for one (the presets name a built-in)"),
    DefaultDifference("trainer.ckpt_path", None, "~/ckpts/", "None: <run_dir>/checkpoints, next to the run store"),
    DefaultDifference("trainer.logger", "console", "wandb", "the run store is the tracker; W&B needs an account "
                      "(WANDB_API_KEY)"),
    DefaultDifference("trainer.fully_async.max_staleness_steps", 1, 4, "skyrl-nb's async pipeline keeps the "
                      "generator at most one step ahead unless asked for more"),
    DefaultDifference("generator.inference_engine.backend", "torch", "vllm",
                      "CPU machines have no vLLM by default; the torch sampler runs everywhere"),
    DefaultDifference("trainer.algorithm.cispo.cispo_eps_clip_low", 1.0, 0.0,
                      "skyrl-nb's CISPO band is SkyRL 0.4's, [0, 5] (ScaleRL's); 0.3's was [1, 6]", only="0.3"),
    DefaultDifference("trainer.algorithm.cispo.cispo_eps_clip_high", 4.0, 5.0, "as cispo_eps_clip_low", only="0.3"),
)


def release(version: str | None) -> str:
    """A SkyRL version as its release, major.minor: ``release("0.3.1")`` -> '0.3'; None -> :data:`SKYRL_VERSION`'s."""
    return ".".join(str(version or SKYRL_VERSION).split(".")[:2])


def release_problem(version: str | None) -> str | None:
    """The one line for a SkyRL release the translation does not take, or None."""
    if release(version) in SUPPORTED:
        return None
    return (f"run.engine: 'skyrl' is translated for SkyRL {', '.join(s + '.x' for s in SUPPORTED)}; the cluster has "
            f"SkyRL {version}; install skyrl[fsdp]=={SKYRL_VERSION} there (docs/skyrl.md)")


def default_differences(version: str | None = None) -> tuple[DefaultDifference, ...]:
    """:data:`DEFAULT_DIFFERENCES` that hold for SkyRL ``version`` (None: :data:`SKYRL_VERSION`)."""
    return tuple(d for d in DEFAULT_DIFFERENCES if d.only in (None, release(version)))


def adapt_to_release(words: list[str], version: str) -> tuple[list[str], list[str]]:
    """The bridge's ``key=value`` words for the installed SkyRL ``version``: a key that release lacks
    (:data:`LACKING`) is dropped at the value that means the same, and refused (one line) at any other.
    Returns ``(words, problems)``."""
    lacking = LACKING.get(release(version), {})
    kept, problems = [], []
    for word in words:
        key, _, text = word.partition("=")
        if key not in lacking:
            kept.append(word)
            continue
        default, why = lacking[key]
        if yaml.safe_load(text) != default:
            problems.append(_lacking_line(key, yaml.safe_load(text), default, why, version))
    return kept, problems


def _lacking_line(key: str, value: Any, default: Any, why: str, version: str | None) -> str:
    return (f"{key}: {skyrl_value(value)} is not allowed with run.engine=skyrl on SkyRL {version}: {why}; allowed: "
            f"{skyrl_value(default)}, or SkyRL {SKYRL_VERSION} on the cluster")


# skyrl-nb keys SkyRL has no counterpart for, whose value does not change what is trained: key -> why
_NOT_SENT = {
    "trainer.num_threads": "torch CPU threads per process; SkyRL's workers run on GPUs",
    "trainer.share_prompt_prefix": "how skyrl-nb's trainer computes its forward passes (the same values to float "
                                   "rounding); SkyRL's packs samples its own way",
    "trainer.lora_base_precision": "how skyrl-nb's CPU trainer computes LoRA's frozen base matmuls (bfloat16 "
                                   "rounding); SkyRL's GPU workers compute under their own mixed precision",
    "run.run_root": "the bridge's --run-dir (<run_root>/<run_id>)",
    "run.run_id": "the bridge's --run-dir; also SkyRL's trainer.run_name",
    "run.store_token_data": "the bridge's --no-token-data when false",
    "run.engine": "picks this translation",
    "data.columns": "the bridge's --columns: it writes the rows in SkyRL's layout (prompt messages, env_class, "
                    "reward_spec) before SkyRL reads them",
    **{f"reward.{k}": f"sent as {REWARD_ENV_KEY}.{k}, a setting of the bridge's environment, when reward.functions "
                      "names a function" for k in ("functions", "timeout_s", "errors", "max_workers")},
    # empty here; environment.shipped.<name> (a class from a notebook cell) is sent: the bridge's config class adds
    # the key and the bridge registers the classes with skyrl-gym before SkyRL's generator makes an env
    "environment.shipped": "no environment class from a notebook cell",
}

# skyrl-nb keys SkyRL has no counterpart for that change what is trained: refused unless at the default
_REFUSED_UNLESS_DEFAULT: dict[str, tuple[Any, str]] = {
    "trainer.async_one_step": (False, "SkyRL has no one-step off-policy schedule; its asynchronous trainer "
                                      "is trainer.fully_async"),
    "trainer.max_restarts": (0, "the bridge's job has no restart supervisor (skyrl_engine.supervisor); resume by "
                                "hand with job.resume()"),
    "plugins": ([], "plug-ins register into skyrl-nb's registries, which SkyRL's trainer does not read; register "
                    "with SkyRL's AdvantageEstimatorRegistry / PolicyLossRegistry in a SkyRL entrypoint instead"),
}

# a section only skyrl-nb has: any other key in it is refused unless at its default (it is not implemented by the
# bridge), so a new skyrl-nb run setting never reaches SkyRL's loader (which refuses unknown keys) unclassified
SKYRL_NB_SECTIONS = ("run.", "trainer.alerts.")



@dataclass
class SkyrlTranslation:
    """A JobConfig translated for SkyRL: ``overrides`` (SkyRL dotted key -> value, every key sent), what
    ``changed`` on the way, what was ``not_sent``, and the ``problems`` that keep it from running on SkyRL.

    ``args()`` are the ``key=value`` words SkyRL's own entrypoint takes; ``command()`` is the bridge's
    command line (what ``launch`` submits and ``%skyrl launch --engine skyrl --dry-run`` prints).
    """

    overrides: dict[str, Any]
    changed: list[Change] = field(default_factory=list)
    not_sent: dict[str, str] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    run_dir: str | None = None
    store_token_data: bool = True
    columns: dict[str, str] = field(default_factory=dict)
    """``data.columns``: the bridge's ``--columns`` (how it reads the rows it writes in SkyRL's layout)."""
    version: str = SKYRL_VERSION
    """The SkyRL release the translation is for."""

    def check(self) -> SkyrlTranslation:
        """Raise ConfigError (one line per problem) unless SkyRL can take this config; return self."""
        if self.problems:
            raise ConfigError(self.problems)
        return self

    def args(self) -> list[str]:
        """``key=value`` words for ``SkyRLTrainConfig.from_cli_overrides`` (values as YAML flow scalars)."""
        return [f"{key}={skyrl_value(value)}" for key, value in self.overrides.items()]

    def command(self, python: str = "python") -> list[str]:
        """The bridge's argv: ``python -m skyrl_engine.skyrl_bridge --run-dir DIR [--no-token-data] [--columns JSON]
        key=value ...``.

        Raises ConfigError when the config has problems, or no run directory (``run.run_id`` unset).
        """
        self.check()
        if self.run_dir is None:
            raise ConfigError(["run.run_id: None has no run directory for the bridge; give run.run_id "
                               "(launch makes one)"])
        flags = ["--run-dir", self.run_dir] + ([] if self.store_token_data else ["--no-token-data"])
        flags += ["--columns", json.dumps(self.columns, sort_keys=True)] if self.columns else []
        return [python, "-m", BRIDGE_MODULE, *flags, *self.args()]

    def command_line(self, python: str = "python") -> str:
        """``command()`` as one shell line (each word quoted where the shell needs it)."""
        return shlex.join(self.command(python))

    def notes(self) -> list[str]:
        """One line per changed or unsent key, for a person reading a dry run."""
        lines = [f"changed: {c}" for c in self.changed]
        lines += [f"not sent: {key} ({why})" for key, why in self.not_sent.items()]
        return lines

    def __repr__(self) -> str:
        state = f"{len(self.problems)} problem(s)" if self.problems else "ready"
        return (f"SkyrlTranslation({len(self.overrides)} keys for SkyRL {self.version}, {len(self.changed)} changed, "
                f"{len(self.not_sent)} not sent, {state}, run_dir={self.run_dir!r})")

    def _repr_html_(self) -> str:
        def rows(items: list[tuple[str, str]]) -> str:
            return "".join(f"<tr><td style='text-align:left'><code>{html.escape(k)}</code></td>"
                           f"<td style='text-align:left'>{html.escape(v)}</td></tr>" for k, v in items)

        parts = [f"<b>{html.escape(repr(self))}</b>"]
        if self.problems:
            parts.append("<ul>" + "".join(f"<li>{html.escape(p)}</li>" for p in self.problems) + "</ul>")
        if self.changed:
            parts.append("<p>changed</p><table>" + rows([(c.key, f"{skyrl_value(c.sent)} — {c.why}")
                                                         for c in self.changed]) + "</table>")
        if self.not_sent:
            parts.append("<p>not sent</p><table>" + rows(list(self.not_sent.items())) + "</table>")
        return "<div>" + "".join(parts) + "</div>"


def skyrl_value(value: Any) -> str:
    """A value as SkyRL's command line (OmegaConf's dotted ``key=value``) reads it back: YAML flow style.

    >>> skyrl_value(1e-06), skyrl_value([0.9, 0.999]), skyrl_value(None), skyrl_value("123"), skyrl_value({})
    ('1.0e-06', '[0.9,0.999]', 'null', "'123'", '{}')
    >>> skyrl_value(["builtin://arithmetic/train"]), skyrl_value(["a,b"])
    ('[builtin://arithmetic/train]', "['a,b']")
    """
    if isinstance(value, list) and value:
        # plain items where YAML reads them back the same (no quotes around paths to escape in a shell)
        compact = "[" + ",".join(skyrl_value(item) for item in value) + "]"
        if _reads_back(compact, value):
            return compact
    text = yaml.safe_dump(value, default_flow_style=True, width=2**31, allow_unicode=True).strip()
    return text[: -len("...")].rstrip() if text.endswith("\n...") else text


def _reads_back(text: str, value: Any) -> bool:
    try:
        return yaml.safe_load(text) == value
    except yaml.YAMLError:
        return False


def translate(cfg: JobConfig, version: str | None = None) -> SkyrlTranslation:
    """``cfg`` as SkyRL's dotted overrides for SkyRL ``version`` (None: :data:`SKYRL_VERSION`; the cluster's, as its
    probe found it, where known), with every change, unsent key and problem (see the module docstring).

    Never raises for a config SkyRL cannot take: ``problems`` holds the lines (``SkyrlTranslation.check``).
    """
    flat = cfg.to_dotted()
    t, a = cfg.trainer, cfg.trainer.algorithm
    run_dir = str(cfg.run_dir) if cfg.run_dir is not None else None
    version = version or SKYRL_VERSION
    out = SkyrlTranslation(overrides={}, run_dir=run_dir, store_token_data=cfg.run.store_token_data,
                           columns=dict(cfg.data.columns), version=version)
    lacking = LACKING.get(release(version), {})
    if release_problem(version):
        out.problems.append(str(release_problem(version)))
    gae = a.advantage_estimator == AdvantageEstimator.GAE

    def change(key: str, sent: Any, why: str) -> None:
        only_skyrl = key not in flat
        out.changed.append(Change(key, None if only_skyrl else flat[key], sent, why, only_skyrl))
        out.overrides[key] = sent

    for key, value in flat.items():
        if key in _NOT_SENT or key.startswith("data.columns."):
            out.not_sent[key] = _NOT_SENT.get(key) or _NOT_SENT["data.columns"]
            if key.startswith("reward.") and not cfg.reward.functions:
                out.not_sent[key] = "no reward.functions: each row's environment scores (environment.env_class)"
        elif key in lacking:
            default, why = lacking[key]
            if value != default:
                out.problems.append(_lacking_line(key, value, default, why, version))
            else:
                out.not_sent[key] = f"{why}; at that value"
        elif key == "environment.env_class" and cfg.reward.functions:
            change(key, REWARD_ENV, f"reward.functions score every sample: the bridge's skyrl-gym environment "
                                    f"{REWARD_ENV} calls them (skyrl_engine.skyrl_reward_env)")
        elif key in _REFUSED_UNLESS_DEFAULT or key.startswith(SKYRL_NB_SECTIONS):
            default, why = _REFUSED_UNLESS_DEFAULT.get(key) or (_default_of(key, type(cfg)), "a skyrl-nb run setting the "
                                                                                 "bridge does not implement")
            if value != default:
                out.problems.append(f"{key}: {skyrl_value(value)} is not allowed with run.engine=skyrl: {why}; "
                                    f"allowed: {skyrl_value(default)}, or run.engine=skyrl_nb")
            elif key not in _REFUSED_UNLESS_DEFAULT:
                out.not_sent[key] = f"{why}; at its default"
        elif key.startswith("environment.shipped."):
            out.overrides[key] = value  # read by the bridge's config class (see _NOT_SENT["environment.shipped"])
        elif key in OVERLONG_KEYS:
            if a.overlong_buffer.len > 0:
                out.overrides[key] = value  # read by the bridge's config class (see OVERLONG_KEYS)
        elif key == "trainer.strategy":
            if value == Strategy.DDP:
                out.problems.append("trainer.strategy: ddp is not allowed with run.engine=skyrl: SkyRL "
                                    "trains with FSDP2 or Megatron; allowed: fsdp2, or run.engine=skyrl_nb")
            change(key, "fsdp", "SkyRL calls its FSDP2 backend 'fsdp' (validate_cfg renames 'fsdp2')")
        elif key == "generator.inference_engine.backend":
            if value == Backend.TORCH:
                change(key, "vllm", "skyrl-nb's torch sampler is not SkyRL's; SkyRL generates with vLLM")
            else:
                out.overrides[key] = value
        elif key == "trainer.ckpt_path":
            if value is not None:
                out.overrides[key] = value
            elif run_dir is not None:
                change(key, str(join(run_dir, "checkpoints")), "<run_dir>/checkpoints, where skyrl-nb's engine puts them")
            else:
                out.not_sent[key] = "None means <run_dir>/checkpoints, and run.run_id is not set yet"
        elif key == "trainer.critic.model.path":
            if gae and value is None:
                change(key, t.policy.model.path, "gae: skyrl-nb's None is a copy of the policy; SkyRL asks for a path")
            elif not gae and value is not None:
                change(key, None, "skyrl-nb trains a critic only for gae; SkyRL builds one whenever this path is set")
            else:
                out.overrides[key] = value
        else:
            out.overrides[key] = value
    _skyrl_only_keys(cfg, run_dir, change)
    _reward_env_keys(cfg, run_dir, change)
    out.problems.extend(_problems(cfg))
    return out


@functools.cache
def _defaults(schema: type) -> dict[str, Any]:
    return schema().to_dotted()


def _default_of(key: str, schema: type) -> Any:
    """The schema's default at a dotted key of skyrl-nb's config (``schema``: the config's class, JobConfig)."""
    return _defaults(schema).get(key)


def _skyrl_only_keys(cfg: JobConfig, run_dir: str | None, change: Any) -> None:
    """Keys only SkyRL has, set so the job behaves as skyrl-nb's would."""
    p = cfg.trainer.placement
    if run_dir is not None:
        if not is_url(run_dir):  # SkyRL makes this folder with os.makedirs: an object-store run keeps SkyRL's default
            change("trainer.export_path", str(join(run_dir, "exports")), "SkyRL's exports stay in the run directory")
        change("trainer.run_name", cfg.run.run_id, "the run id")
    # skyrl-nb's frozen reference sits beside the policy; SkyRL places it by its own counts
    change("trainer.placement.ref_num_nodes", p.policy_num_nodes, "the reference beside the policy, as in skyrl-nb")
    change("trainer.placement.ref_num_gpus_per_node", p.policy_num_gpus_per_node,
           "the reference beside the policy, as in skyrl-nb")


def _reward_env_keys(cfg: JobConfig, run_dir: str | None, change: Any) -> None:
    """``reward.*`` as the settings of the bridge's environment (:data:`REWARD_ENV`), when functions are named."""
    r = cfg.reward
    if not r.functions:
        return
    why = f"reward.{{}} as a setting of {REWARD_ENV}, the environment that calls the reward functions"
    change(f"{REWARD_ENV_KEY}.functions", [{"name": f.name, "file": f.file, "weight": float(f.weight)}
                                           for f in r.functions], why.format("functions"))
    change(f"{REWARD_ENV_KEY}.timeout_s", float(r.timeout_s), why.format("timeout_s"))
    change(f"{REWARD_ENV_KEY}.errors", str(r.errors), why.format("errors"))
    change(f"{REWARD_ENV_KEY}.max_workers", int(r.max_workers), why.format("max_workers"))
    if run_dir is not None:
        change(f"{REWARD_ENV_KEY}.run_dir", run_dir, "where the shipped functions are (inputs://: <run_dir>/inputs/)")


def _problems(cfg: JobConfig) -> list[str]:
    """What SkyRL's trainer (as the bridge runs it) refuses beyond the keys themselves, each as one line."""
    t, g, a, p = cfg.trainer, cfg.generator, cfg.trainer.algorithm, cfg.trainer.placement
    found = []
    if t.fully_async.enabled:
        found.append(f"trainer.fully_async.enabled: true is not allowed with run.engine=skyrl: the bridge runs SkyRL's "
                     f"synchronous trainer (SkyRL's fully async one has its own entrypoint and takes only "
                     f"{', '.join(sorted(ROLLOUT_LOSSES))}); allowed: false, or run.engine=skyrl_nb")
    if p.colocate_all:
        policy_gpus = p.policy_num_nodes * p.policy_num_gpus_per_node
        engine_gpus = g.inference_engine.num_engines * g.inference_engine.tensor_parallel_size
        if policy_gpus != engine_gpus:
            found.append(f"trainer.placement.colocate_all: true is not allowed with run.engine=skyrl when the policy's "
                         f"{policy_gpus} GPU(s) (policy_num_nodes × policy_num_gpus_per_node) differ from the "
                         f"engines' {engine_gpus} (num_engines × tensor_parallel_size); allowed: equal counts, or false")
    roles = [("policy", t.policy_mini_batch_size, p.policy_num_nodes * p.policy_num_gpus_per_node)]
    if a.advantage_estimator == AdvantageEstimator.GAE:
        roles.append(("critic", t.critic_mini_batch_size, p.critic_num_nodes * p.critic_num_gpus_per_node))
    for role, mini, gpus in roles:  # SkyRL counts micro-batches per GPU: each GPU's share of a mini-batch
        per_gpu = mini * g.n_samples_per_prompt // max(1, gpus)
        if per_gpu % t.micro_train_batch_size_per_gpu:
            found.append(f"trainer.micro_train_batch_size_per_gpu: {t.micro_train_batch_size_per_gpu} does not divide "
                         f"one GPU's share of a {role} mini-batch on run.engine=skyrl ({role}_mini_batch_size × "
                         f"n_samples_per_prompt / {gpus} {role} GPU(s) = {per_gpu} samples); allowed: a divisor of "
                         f"{per_gpu}")
    if a.loss_reduction == "seq_mean_token_sum_norm" and a.max_seq_len is None:
        found.append("trainer.algorithm.max_seq_len: None is not allowed with loss_reduction=seq_mean_token_sum_norm "
                     "on run.engine=skyrl; give the token budget the loss is normalised by")
    return found
