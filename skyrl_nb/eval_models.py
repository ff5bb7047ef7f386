"""What an evaluation's ``models`` are: each thing a user can name a model by, found and named before any job runs.

``skyrl_nb.evaluate(models, ...)`` takes a list (or a ``{name: model}`` dict) of any of:

- a run: a ``Job``, a ``RunReader``, a run folder or URL (its latest checkpoint), ``"<run>@step=N"`` or a
  ``(run, N)`` tuple (checkpoint N), or a run id under the run root;
- an export: a folder (or ``s3://`` prefix) ``job.export`` wrote, or any Hugging Face model folder;
- a model: a local model directory or ``.gguf`` file (on a cluster elsewhere, a path on the cluster's own disk);
- a built-in model: ``builtin://tiny-qwen2``, ``builtin://smollm2-135m-instruct``.

:func:`find_models` turns them into the ``evaluation.models`` entries (``skyrl_core.eval_config.EvalModel``): a
name each, what it is, where the job finds it and, for a run, the checkpoint step, checked against the run's
checkpoints where this notebook can see them. Anything else is refused in one line naming ``models``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from skyrl_core.catalog import BUILTIN_MODELS, BUILTIN_PREFIX
from skyrl_core.config import ConfigError
from skyrl_core.eval_config import MODEL_NAME_PATTERN, EvalModel, is_model_name
from skyrl_core.exports import ExportResult
from skyrl_core.store import is_url, open_store

_STEP_RE = re.compile(r"^(.+)@step=(\d+)$")
_GIVE = ("give a Job, a run folder or URL, (run, step) or '<run>@step=N', an export folder, a model directory or "
         f".gguf file, or a built-in model ({', '.join(BUILTIN_MODELS)})")


@dataclass
class FoundModel:
    """One model of an evaluation as the notebook found it: its ``evaluation.models`` entry, and for a run its
    config (the eval job's starting config when no other is given) and the cluster a ``Job`` ran on."""

    model: EvalModel
    run_config: dict[str, Any] | None = None
    cluster: Any = None
    step_given: bool = False

    @property
    def name(self) -> str:
        return self.model.name


def find_models(models: Any, *, run_root: str | None = None,
                sees_here: Callable[[str], bool] = lambda _path: True) -> list[FoundModel]:
    """``models`` (see the module docstring) as :class:`FoundModel`, in the user's order; :class:`ConfigError`
    (one line naming ``models``) for one that is none of those, a step with no checkpoint, a name given twice.

    ``run_root`` is where a bare run id is looked for; ``sees_here(path)`` says whether the cluster reads that path on
    this notebook's disk (one missing here is then refused; else it may be a path on the cluster's own disk)."""
    if isinstance(models, dict):
        named = list(models.items())
    elif isinstance(models, (list, tuple)) and not _is_run_step(models):
        named = [(None, m) for m in models]
    else:
        named = [(None, models)]
    if not named:
        raise ConfigError([f"models: none given; {_GIVE}"])
    found: list[FoundModel] = []
    taken: set[str] = set()
    for given_name, source in named:
        one = _find(source, run_root, sees_here)
        name = given_name if given_name is not None else _unique(one.model.name, taken)
        if not is_model_name(name):
            raise ConfigError([f"models: the name {name!r} cannot name a model; use letters, digits and '_', '.', '-', "
                               f"'@', '=' (pattern {MODEL_NAME_PATTERN})"])
        if name in taken:
            raise ConfigError([f"models: the name {name!r} is given twice; each model needs its own name"])
        taken.add(name)
        one.model = one.model.model_copy(update={"name": name})
        found.append(one)
    return found


def _is_run_step(value: Any) -> bool:
    """``(run, N)``: a tuple of a model and a step number."""
    return (isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], int)
            and not isinstance(value[1], bool))


def _unique(name: str, taken: set[str]) -> str:
    name = re.sub(r"[^A-Za-z0-9_.@=-]+", "-", name).strip("-_.@=")[:72] or "model"
    if not name[0].isalnum():
        name = f"m{name}"
    candidate, k = name, 2
    while candidate in taken:
        candidate, k = f"{name}-{k}", k + 1
    return candidate


def _find(source: Any, run_root: str | None, sees_here: Callable[[str], bool]) -> FoundModel:
    step: int | None = None
    step_given = False
    if _is_run_step(source):
        source, step = source
        step_given = True
        if step < 0:
            raise ConfigError([f"models: step {step} is not a checkpoint step; give a global step >= 0"])
    if hasattr(source, "run_dir") and (hasattr(source, "submission_id") or hasattr(source, "trajectory_steps")):
        return _run(source, str(source.run_dir), step, step_given, run_config(source), getattr(source, "cluster", None))
    if isinstance(source, ExportResult):  # what job.export returned: its folder (or s3:// prefix)
        source = source.path
    if isinstance(source, os.PathLike):
        source = os.fspath(source)
    if not isinstance(source, str) or not source.strip():
        raise ConfigError([f"models: {source!r} ({type(source).__name__}) is not a model; {_GIVE}"])
    text = source.strip()
    if not step_given and (m := _STEP_RE.match(text)):
        text, step, step_given = m.group(1), int(m.group(2)), True
    if text.startswith(BUILTIN_PREFIX):
        if text not in BUILTIN_MODELS:
            raise ConfigError([f"models: {text!r} is not a built-in model; allowed: {', '.join(BUILTIN_MODELS)}"])
        return _not_a_run(text, "builtin", text, text[len(BUILTIN_PREFIX):], step_given)
    if is_url(text):
        return _from_url(text, step, step_given)
    path = os.path.abspath(os.path.expanduser(text))
    if os.path.exists(path):
        return _from_path(text, path, step, step_given)
    if run_root and "/" not in text:  # a run id under the run root
        under = f"{run_root.rstrip('/')}/{text}" if is_url(run_root) else os.path.join(os.path.expanduser(run_root), text)
        try:
            files = open_store(under).list()
        except Exception:  # noqa: BLE001 - an unreadable root: the line below says what was looked for
            files = {}
        if _is_run_folder(files):
            return _run(text, under, step, step_given, _read_config(under), None)
    if not sees_here(path) and os.path.isabs(os.path.expanduser(text)) and not step_given:
        return _not_a_run(text, "model", text, os.path.basename(text.rstrip("/")).removesuffix(".gguf"), False)
    where = f"no folder {path}" + (f", no run {text!r} in {run_root}" if run_root and "/" not in text else "")
    raise ConfigError([f"models: {source!r} is no run, export, model directory or built-in model here ({where}); "
                       f"{_GIVE}"])


def _not_a_run(source: str, kind: str, location: str, name: str, step_given: bool) -> FoundModel:
    if step_given:
        raise ConfigError([f"models: {source!r} is {'a built-in model' if kind == 'builtin' else 'an ' + kind}, not a "
                           "run; a step picks a run's checkpoint"])
    return FoundModel(EvalModel(name=name or "model", source=source, kind=kind, location=location))


def _is_run_folder(files: Any) -> bool:
    return "config.yaml" in files or "status.json" in files


def _from_path(text: str, path: str, step: int | None, step_given: bool) -> FoundModel:
    name = os.path.basename(path.rstrip("/"))
    if os.path.isfile(path):
        if path.endswith(".gguf"):
            return _not_a_run(text, "model", path, name.removesuffix(".gguf"), step_given)
        raise ConfigError([f"models: {text!r} is a file, not a model directory, run folder or .gguf file; {_GIVE}"])
    files = set(os.listdir(path))
    if _is_run_folder(files):
        return _run(text, path, step, step_given, _read_config(path), None)
    if "config.json" in files:
        return _not_a_run(text, "export" if "skyrl_export.json" in files else "model", path, name, step_given)
    raise ConfigError([f"models: {text!r} is a folder with no run (config.yaml, status.json) and no model "
                       f"(config.json); {_GIVE}"])


def _from_url(url: str, step: int | None, step_given: bool) -> FoundModel:
    url = url.rstrip("/")
    try:
        files = open_store(url).list()
    except Exception as err:  # noqa: BLE001 - no credentials, no bucket, no package for the scheme: one line
        raise ConfigError([f"models: {url} cannot be read here ({type(err).__name__}: "
                           f"{' '.join(str(err).split())[:160]})"]) from None
    if _is_run_folder(files):
        return _run(url, url, step, step_given, _read_config(url), None)
    if "config.json" in files:
        return _not_a_run(url, "export", url, url.rpartition("/")[2], step_given)
    raise ConfigError([f"models: {url} holds no run (config.yaml, status.json) and no model (config.json); {_GIVE}"])


def run_config(run: Any) -> dict[str, Any]:
    """A Job's submitted config (Ray keeps it), else its run store's config.yaml."""
    if hasattr(run, "submitted_config"):
        try:
            return dict(run.submitted_config())
        except Exception:  # noqa: BLE001 - an unreachable cluster: the run store still has the config
            pass
    reader = run.run if hasattr(run, "submission_id") else run
    return dict(reader.config() or {})


def _read_config(run_dir: str) -> dict[str, Any]:
    from skyrl_core.runs import RunReader

    return dict(RunReader(run_dir).config() or {})


def _run(source: Any, run_dir: str, step: int | None, step_given: bool, config: dict[str, Any],
         cluster: Any) -> FoundModel:
    run_id = run_dir.rstrip("/").replace("\\", "/").rpartition("/")[2]
    step = checkpoint_step(run_id, run_dir, step, config)
    shown = source if isinstance(source, str) else run_dir
    name = f"{run_id}@step={step}" if step_given else run_id
    model = EvalModel(name=_unique(name, set()), source=shown, kind="run", location=run_dir, step=step)
    return FoundModel(model, run_config=config, cluster=cluster, step_given=step_given)


def checkpoint_step(run_id: str, run_dir: str, step: int | None, config: dict[str, Any]) -> int | None:
    """The checkpoint step a run model is evaluated at: ``step`` checked against the run's checkpoints, or (None)
    its latest. Where this notebook cannot see the checkpoints (``trainer.ckpt_path`` on the cluster's own disk)
    ``step`` as given (the job says when it is missing). ConfigError (one line) for a run with no checkpoint, or
    none at ``step``."""
    from skyrl_core.resume import STEP_DIR_RE, checkpoint_root, latest_checkpoint

    trainer = config.get("trainer") if isinstance(config.get("trainer"), dict) else {}
    root = checkpoint_root(trainer.get("ckpt_path"), run_dir)
    if not is_url(root) and not os.path.isdir(os.path.dirname(root.rstrip("/")) or "/"):
        return step  # the cluster's disk: the job checks
    try:
        steps = sorted(int(m.group(1)) for f in open_store(root).folders() if (m := STEP_DIR_RE.match(f)))
        latest = latest_checkpoint(root) if steps else None
    except (OSError, ValueError):
        return step
    if not steps:
        interval = trainer.get("ckpt_interval", "?")
        raise ConfigError([f"models: run {run_id!r} has no checkpoint yet (in {root}); a run writes one every "
                           f"trainer.ckpt_interval={interval} steps and at its end"])
    if step is None:
        return latest if latest is not None else steps[-1]
    if step not in steps:
        shown = ", ".join(map(str, steps[-10:]))
        raise ConfigError([f"models: run {run_id!r} has no checkpoint at step {step}; steps with one: {shown}"])
    return step
