"""Export a checkpoint's policy as a Hugging Face model directory that ``transformers`` and vLLM serve.

::

    python -m skyrl_engine export ~/skyrl-runs/my-run ./my-model                  # the latest checkpoint
    python -m skyrl_engine export ~/skyrl-runs/my-run s3://bucket/models/my-run --step 40

What lands in the destination, and nothing else of the checkpoint (no optimizer, RNG or FSDP state)::

    config.json                  the policy's (``architectures`` names the class transformers and vLLM build)
    model.safetensors            the consolidated weights as trained (float32; LoRA already merged)
    tokenizer.json, tokenizer_config.json, chat_template.jinja, ...
                                 the tokenizer saved with the checkpoint, or, for checkpoints without one,
                                 the run's base model's (``trainer.policy.model.path``)
    generation_config.json       the checkpoint's (else the base model's, else a new one), with the eos and
                                 pad ids of the tokenizer: generation stops where the engine's sampler stopped
    adapter/                     only when the run trained LoRA: the PEFT adapter (adapter_model.safetensors
                                 + adapter_config.json), for serving the base model with an adapter instead
    skyrl_export.json, README.md where it came from: run, step, base model

A local destination is assembled in a hidden sibling directory and renamed into place, so it either
appears whole or not at all. ``s3://bucket/prefix`` is built in a local temporary directory and then
uploaded file by file with boto3 (credentials from the usual boto3 chain; they are never printed).

One idea, a checkpoint as a servable model directory; its length is the checks that make the result load anywhere.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from skyrl_core.exports import ExportError, ExportResult
from skyrl_core.store import is_url
from skyrl_engine import checkpoint, lora
from skyrl_engine.gguf_models import special_token_problems
from skyrl_engine.models import TINY_MODEL, copy_tokenizer_files, load_tokenizer, resolve_model_path
from skyrl_engine.tasks import load_prompts

WEIGHT_FILE = re.compile(r"^model(-\d+-of-\d+)?\.safetensors$|^model\.safetensors\.index\.json$")
ADAPTER_FILES = (lora.ADAPTER_WEIGHTS, lora.ADAPTER_CONFIG)
GENERATION_CONFIG = "generation_config.json"
METADATA_FILE = "skyrl_export.json"
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:/")
_SOURCE_KINDS = ("a run directory, a checkpoint root (latest_ckpt_global_step.txt, global_step_N/), "
                 "a global_step_N directory or its policy/ directory (config.json + model.safetensors)")
# A text with spaces, digits and punctuation: a tokenizer that loads differently encodes it differently.
_PROBE_TEXT = "Hello, world! 12 + 30 = 42.\nDone?"


@dataclass(frozen=True)
class _Checkpoint:
    """The policy directory to export and what is known about the run around it."""

    policy_dir: str
    step: int | None
    step_dir: str | None
    run_dir: str | None
    origin: str | None = None
    """The object-store URL of the ``global_step_N`` directory when ``policy_dir`` is a download of it."""
    origin_run: str | None = None
    """The run's object-store URL, when known (then ``run_dir`` is None)."""


def export_model(source: str | os.PathLike[str], dest: str | os.PathLike[str], *, step: int | None = None) -> ExportResult:
    """Write the policy of a checkpoint as a Hugging Face model directory (see the module docstring).

    ``source`` is a run directory, a checkpoint root, a ``global_step_N`` directory or its ``policy/``;
    ``step`` picks a checkpoint under a run or checkpoint root (default: the latest complete one).
    ``dest`` is a new (or empty) local directory or ``s3://bucket/prefix``. The result loads with plain
    ``AutoModelForCausalLM.from_pretrained(dest)`` / ``AutoTokenizer.from_pretrained(dest)`` and ``vllm serve
    dest``. ``dest/adapter/`` holds the LoRA adapter when the run trained one (optional: absent otherwise).
    Raises :class:`ExportError` (one line) for a source, step or destination that cannot be used.

    >>> export_model("~/skyrl-runs/my-run", "./my-model")             # doctest: +SKIP
    ExportResult(path='/home/me/my-model', step=50, run='my-run', files=8, size='2.0 MB', adapter=False, warnings=0)
    """
    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ExportError(f"step: {step!r} is not a checkpoint step; give a global step >= 0, or None for the latest")
    dest, source = os.fspath(dest), os.fspath(source)
    if _SCHEME.match(dest) and not dest.startswith("s3://"):
        raise ExportError(f"dest: {dest!r}: only a local directory or s3://bucket/prefix is supported")
    if is_url(source):  # a run (or checkpoint) on an object store: the policy's files come down first
        with tempfile.TemporaryDirectory(prefix="skyrl-export-source-") as local:
            return _export(fetch_checkpoint(source, step, local), dest)
    return _export(find_checkpoint(source, step), dest)


def _export(ckpt: _Checkpoint, dest: str) -> ExportResult:
    return _export_to_s3(ckpt, dest) if dest.startswith("s3://") else _export_local(ckpt, dest)


# -- finding the checkpoint ----------------------------------------------------------------------------

_OPTIMIZER_FILE = re.compile(r"^(optim|extra_state)_world_size_\d+_rank_\d+\.pt$")


def fetch_checkpoint(url: str, step: int | None, local: str) -> _Checkpoint:
    """Download what an export reads of the checkpoint a run, checkpoint root or ``global_step_N`` URL names
    (the policy's model, tokenizer and adapter, the trainer state; not the optimizer's shards) into ``local``."""
    import yaml

    from skyrl_core.store import open_store

    url = url.rstrip("/")
    parent, _, name = url.rpartition("/")
    try:
        here = open_store(url)
        files = here.list()
        if re.match(r"^global_step_\d+$", name):
            root, run_url, pinned = parent, None, checkpoint.step_of(name)
        elif checkpoint.LATEST_FILE in files or any(re.match(r"^global_step_\d+$", f) for f in here.folders()):
            root, run_url, pinned = url, None, None
        elif "config.yaml" in files or "status.json" in files:
            cfg = yaml.safe_load(here.read("config.yaml")) if "config.yaml" in files else {}
            root, run_url, pinned = checkpoint.checkpoint_root(_dig(cfg, "trainer.ckpt_path"), url), url, None
        else:
            raise ExportError(f"source: {url} holds no checkpoint; give {_SOURCE_KINDS}")
        if pinned is not None and step is not None and step != pinned:
            raise ExportError(f"step: {step} does not match the source {url}, which is step {pinned}; leave the step "
                              "out or give the run directory")
        store = open_store(root)
        steps = sorted(int(m.group(1)) for f in store.folders() if (m := re.match(r"^global_step_(\d+)$", f)))
        chosen = pinned if pinned is not None else step if step is not None else checkpoint.latest_step(root)
        chosen = steps[-1] if chosen is None and steps else chosen
        if chosen is None:
            raise ExportError(f"source: no checkpoint in {root} (no global_step_N directory); a run writes one every "
                              "trainer.ckpt_interval steps and at its end")
        if chosen not in steps:
            raise ExportError(f"step: {chosen} has no checkpoint in {root}; steps there: {_listing(steps)}")
        step_name = f"{checkpoint.STEP_PREFIX}{chosen}"
        target = os.path.join(local, step_name)
        os.makedirs(os.path.join(target, "policy"))
        for rel in ("trainer_state.json", *(f"policy/{f}" for f in store.list(f"{step_name}/policy")
                                          if not _OPTIMIZER_FILE.match(f))):
            with open(os.path.join(target, rel), "wb") as out:
                out.write(store.read(f"{step_name}/{rel}"))
        store.download_folder(f"{step_name}/policy/{lora.ADAPTER_DIR}", os.path.join(target, "policy", lora.ADAPTER_DIR))
    except ExportError:
        raise
    except Exception as err:  # an unreachable store, missing credentials, a missing object: one line
        raise ExportError(f"source: {url}: cannot be read ({type(err).__name__}: {' '.join(str(err).split())[:200]})")\
            from None
    found = _pinned(url, target, chosen)
    return _Checkpoint(found.policy_dir, chosen, found.step_dir, None, origin=checkpoint.step_dir(root, chosen),
                       origin_run=run_url)

def _is_policy_dir(path: str) -> bool:
    return os.path.isfile(os.path.join(path, "config.json")) and any(
        WEIGHT_FILE.match(name) and name.endswith(".safetensors") for name in os.listdir(path))


def _steps(root: str) -> list[int]:
    """The steps with a ``global_step_N`` directory under ``root`` (complete: they appear by rename)."""
    if not os.path.isdir(root):
        return []
    return sorted(int(m.group(1)) for name in os.listdir(root)
                  if (m := re.match(r"^global_step_(\d+)$", name)) and os.path.isdir(os.path.join(root, name)))


def _is_run_dir(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name)) for name in ("config.yaml", "status.json"))


def _read_yaml(path: str) -> dict[str, Any]:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError):
        return {}
    return data if isinstance(data, dict) else {}


def _dig(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def find_checkpoint(source: str | os.PathLike[str], step: int | None = None) -> _Checkpoint:
    """The policy directory ``source`` and ``step`` name (see :func:`export_model`); ExportError otherwise."""
    given = os.fspath(source)
    path = os.path.abspath(os.path.expanduser(given))
    if not os.path.isdir(path):
        raise ExportError(f"source: {given} is not a directory; give {_SOURCE_KINDS}")
    name = os.path.basename(path)
    if _is_policy_dir(path):
        parent = os.path.dirname(path)
        if re.match(r"^global_step_\d+$", os.path.basename(parent)):
            return _pinned(given, parent, step, policy_dir=path)
        if step is not None:
            raise ExportError(f"step: {step} picks a checkpoint under a run or checkpoint root, but {given} is one "
                              "model directory; leave the step out")
        return _Checkpoint(path, None, None, None)
    if re.match(r"^global_step_\d+$", name):
        return _pinned(given, path, step)
    if os.path.isfile(os.path.join(path, checkpoint.LATEST_FILE)) or _steps(path):
        root = path
        run_dir = os.path.dirname(path) if _is_run_dir(os.path.dirname(path)) else None
    elif _is_run_dir(path):
        run_dir = path
        root = checkpoint.checkpoint_root(_dig(_read_yaml(os.path.join(path, "config.yaml")), "trainer.ckpt_path"), path)
    else:
        raise ExportError(f"source: {given} holds no checkpoint; give {_SOURCE_KINDS}")
    steps = _steps(root)
    if step is None:
        try:
            step = checkpoint.latest_step(root)
        except FileNotFoundError as err:  # the latest file names a step whose directory is gone
            raise ExportError(f"source: {err}; steps there: {_listing(steps)} (pick one with step=N)") from None
        if step is None and steps:
            step = steps[-1]
        if step is None:
            raise ExportError(f"source: no checkpoint in {root} (no global_step_N directory); a run writes one every "
                              "trainer.ckpt_interval steps and at its end")
    elif step not in steps:
        raise ExportError(f"step: {step} has no checkpoint in {root}; steps there: {_listing(steps)}")
    found = _pinned(given, checkpoint.step_dir(root, step), step)
    return _Checkpoint(found.policy_dir, step, found.step_dir, run_dir)


def _pinned(given: str, step_dir: str, step: int | None, policy_dir: str | None = None) -> _Checkpoint:
    """The checkpoint in ``global_step_N`` directory ``step_dir``; ``step`` (when given) must be N."""
    n = checkpoint.step_of(step_dir)
    if step is not None and step != n:
        raise ExportError(f"step: {step} does not match the source {given}, which is step {n}; leave the step out "
                          "or give the run directory")
    policy_dir = policy_dir or os.path.join(step_dir, "policy")
    if not _is_policy_dir(policy_dir):
        raise ExportError(f"source: {step_dir} has no policy model ({policy_dir} needs config.json and "
                          "model.safetensors); not a checkpoint this engine wrote")
    root = os.path.dirname(step_dir)
    run_dir = os.path.dirname(root) if _is_run_dir(os.path.dirname(root)) else None
    return _Checkpoint(policy_dir, n, step_dir, run_dir)


def _listing(steps: list[int]) -> str:
    if not steps:
        return "none"
    shown = ", ".join(map(str, steps[-10:]))
    return shown if len(steps) <= 10 else f"{len(steps)} checkpoints, the last ones {shown}"


def _run_config(ckpt: _Checkpoint) -> dict[str, Any]:
    """The config the checkpoint was trained with: its trainer_state.json's, else the run's config.yaml."""
    if ckpt.step_dir:
        try:
            cfg = checkpoint.read_trainer_state(ckpt.step_dir).get("config")
        except (OSError, ValueError):
            cfg = None
        if isinstance(cfg, dict):
            return cfg
    return _read_yaml(os.path.join(ckpt.run_dir, "config.yaml")) if ckpt.run_dir else {}


def _base_model_dir(cfg: dict[str, Any], policy_dir: str) -> str:
    """The run's base model as a local directory (``resolve_model_path``; the built-in tiny model needs the
    train rows it was warm-started on)."""

    path = _dig(cfg, "trainer.policy.model.path")
    why = f"{policy_dir} has no tokenizer files, so the export takes them from the run's base model"
    if not isinstance(path, str) or not path:
        raise ExportError(f"trainer.policy.model.path: not found in the checkpoint's config; {why}")
    rows = None
    if path == TINY_MODEL:

        train_data = _dig(cfg, "data.train_data") or []
        rows = load_prompts(list(train_data), _dig(cfg, "environment.env_class") or "arithmetic")
    try:
        return resolve_model_path(path, rows, int(_dig(cfg, "trainer.seed") or 0))
    except (FileNotFoundError, ValueError) as err:
        raise ExportError(f"{' '.join(str(err).split())} ({why})") from None


# -- writing the model directory -------------------------------------------------------------------------

def _has_tokenizer(path: str) -> bool:
    return any(os.path.isfile(os.path.join(path, name))
               for name in ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json"))


def _generation_config(sources: list[str], tokenizer) -> dict[str, Any]:
    """The first ``generation_config.json`` of ``sources`` (or a new one), with the tokenizer's eos and pad ids:
    the tokenizer's EOS is among ``eos_token_id`` (other stop ids there are kept), pad is the tokenizer's."""
    import transformers

    gen: dict[str, Any] = {}
    for folder in sources:
        path = os.path.join(folder, GENERATION_CONFIG)
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                gen = json.load(f)
            break
    eos = tokenizer.eos_token_id
    if eos is not None:
        declared = gen.get("eos_token_id")
        ids = [i for i in (declared if isinstance(declared, list) else [declared]) if isinstance(i, int)]
        ids = [eos] + [i for i in ids if i != eos]
        gen["eos_token_id"] = ids[0] if len(ids) == 1 else ids
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    if pad is not None:
        gen["pad_token_id"] = pad
    if tokenizer.bos_token_id is not None:
        gen["bos_token_id"] = tokenizer.bos_token_id
    # a config marked as derived from the model config may be replaced by it in generate(): ours is the one
    gen.pop("_from_model_config", None)
    gen.setdefault("transformers_version", transformers.__version__)
    return gen


def _auto_tokenizer_problem(out: str, tokenizer) -> str | None:
    """Why ``AutoTokenizer.from_pretrained(out)`` would not tokenize like the run's tokenizer, or None."""
    from transformers import AutoTokenizer
    from transformers.utils import logging as hf_logging

    verbosity = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        auto = AutoTokenizer.from_pretrained(out)
    except Exception as err:  # what a user would hit: say it, the export itself is fine
        return f"AutoTokenizer.from_pretrained fails on it ({type(err).__name__}); load the tokenizer with " \
               f"{type(tokenizer).__name__}.from_pretrained"
    finally:
        hf_logging.set_verbosity(verbosity)
    want = tokenizer.encode(_PROBE_TEXT, add_special_tokens=False)
    if auto.encode(_PROBE_TEXT, add_special_tokens=False) == want:
        return None
    return (f"AutoTokenizer loads this tokenizer as {type(auto).__name__} (transformers picks the class by "
            f"config.json's model_type), which encodes text differently from the tokenizer the run trained with; "
            f"load it with transformers.PreTrainedTokenizerFast.from_pretrained(path)")


def _build(ckpt: _Checkpoint, out: str, shown_as: str) -> ExportResult:
    """Write the model directory for ``ckpt`` into the empty directory ``out``."""

    policy = ckpt.policy_dir
    warnings: list[str] = []
    for name in sorted(os.listdir(policy)):
        if name == "config.json" or WEIGHT_FILE.match(name):
            shutil.copyfile(os.path.join(policy, name), os.path.join(out, name))
    with open(os.path.join(out, "config.json"), encoding="utf-8") as f:
        if not json.load(f).get("architectures"):
            warnings.append(f"{policy}/config.json names no architectures; vLLM needs them to pick the model class")
    cfg = _run_config(ckpt)
    base_model = _dig(cfg, "trainer.policy.model.path")
    gen_sources = [policy]
    if _has_tokenizer(policy):
        copy_tokenizer_files(policy, out)
    else:
        base_dir = _base_model_dir(cfg, policy)
        copy_tokenizer_files(base_dir, out)
        gen_sources.append(base_dir)
    tokenizer = load_tokenizer(out)
    if tokenizer.eos_token_id is None:
        warnings.append("the tokenizer has no EOS token: generation will only stop at max_new_tokens")
    if not tokenizer.chat_template:
        warnings.append("the tokenizer has no chat template: apply_chat_template and chat serving will not work")
    gen = _generation_config(gen_sources, tokenizer)
    with open(os.path.join(out, GENERATION_CONFIG), "w", encoding="utf-8") as f:
        json.dump(gen, f, indent=2, sort_keys=True)
    warnings += special_token_problems(out, tokenizer)
    auto_problem = _auto_tokenizer_problem(out, tokenizer)
    if auto_problem:
        warnings.append(auto_problem)
    adapter = lora.has_adapter(policy)
    if adapter:
        os.makedirs(os.path.join(out, lora.ADAPTER_DIR))
        for name in ADAPTER_FILES:
            shutil.copyfile(os.path.join(policy, lora.ADAPTER_DIR, name), os.path.join(out, lora.ADAPTER_DIR, name))
    run_dir = ckpt.origin_run or ckpt.run_dir
    shown_policy = f"{ckpt.origin}/policy" if ckpt.origin else policy  # where it came from, not the download
    meta = {
        "format": 1, "exported_by": "skyrl-nb", "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "run_dir": run_dir, "run_id": os.path.basename(run_dir) if run_dir else None,
        "step": ckpt.step, "checkpoint": shown_policy, "base_model": base_model,
        "tokenizer_from": "checkpoint" if len(gen_sources) == 1 else gen_sources[1],
        "adapter": "adapter/" if adapter else None,
        "tokenizer_class": "PreTrainedTokenizerFast" if auto_problem else "AutoTokenizer", "warnings": warnings,
    }
    with open(os.path.join(out, METADATA_FILE), "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=2)
    with open(os.path.join(out, "README.md"), "w", encoding="utf-8") as f:
        f.write(_readme(meta, shown_as))
    files = tuple(sorted(os.path.relpath(os.path.join(d, n), out) for d, _, names in os.walk(out) for n in names))
    size = sum(os.path.getsize(os.path.join(out, rel)) for rel in files)
    return ExportResult(path=shown_as, step=ckpt.step, checkpoint=shown_policy, run_dir=run_dir, base_model=base_model,
                        files=files, total_bytes=size, adapter=adapter, warnings=tuple(warnings))


def _readme(meta: dict[str, Any], where: str) -> str:
    what = f"step {meta['step']}" if meta["step"] is not None else "a checkpoint"
    run = f" of run `{meta['run_id']}`" if meta["run_id"] else ""
    lines = [
        "---", "library_name: transformers", "tags: [skyrl-nb, reinforcement-learning]", "---", "",
        f"# {meta['run_id'] or 'skyrl-nb model'} ({what})", "",
        f"Exported by skyrl-nb from {what}{run} (`{meta['checkpoint']}`) on {meta['exported_at']}.",
        f"Base model: `{meta['base_model']}`. Weights are float32, LoRA (if any) merged.", "",
        "```python", f"from transformers import AutoModelForCausalLM, {meta['tokenizer_class']}", "",
        f'model = AutoModelForCausalLM.from_pretrained("{where}")',
        f'tokenizer = {meta["tokenizer_class"]}.from_pretrained("{where}")', "```", "",
        f"Serve it with vLLM: `vllm serve {where}`.",
    ]
    if meta["adapter"]:
        lines += ["", "`adapter/` holds the LoRA adapter alone (PEFT format), for serving the base model with it."]
    if meta["warnings"]:
        lines += ["", "Notes:", ""] + [f"- {w}" for w in meta["warnings"]]
    return "\n".join(lines) + "\n"


def _export_local(ckpt: _Checkpoint, dest: str) -> ExportResult:
    """Build into a hidden sibling of ``dest`` and rename it into place."""
    final = os.path.abspath(os.path.expanduser(dest))
    if os.path.exists(final) and (not os.path.isdir(final) or os.listdir(final)):
        raise ExportError(f"dest: {final} already exists and is not empty; give a new directory")
    parent = os.path.dirname(final)
    os.makedirs(parent, exist_ok=True)
    tmp = os.path.join(parent, f".{os.path.basename(final)}.tmp-{uuid.uuid4().hex[:8]}")
    os.mkdir(tmp)
    try:
        result = _build(ckpt, tmp, final)
        if os.path.isdir(final):
            os.rmdir(final)  # empty; fails (and keeps what is there) if something was written meanwhile
        os.rename(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return result


# -- s3 -----------------------------------------------------------------------------------------------------

def parse_s3_url(url: str) -> tuple[str, str]:
    """``(bucket, prefix)`` of ``s3://bucket/prefix``; ExportError for anything else."""
    from skyrl_core.store import S3_BUCKET_RULE, s3_bucket_prefix

    found = s3_bucket_prefix(url)
    if found is None:
        raise ExportError(f"dest: {url!r} does not name an S3 bucket; give s3://bucket/prefix ({S3_BUCKET_RULE})")
    bucket, prefix = found
    if not prefix:
        raise ExportError(f"dest: {url!r} has no prefix; give s3://{bucket}/<prefix> for the model's files")
    return bucket, prefix


def _s3_client(bucket: str, prefix: str) -> Any:
    """An S3 client that can write under ``prefix`` of an existing ``bucket`` where nothing is yet."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

    url = f"s3://{bucket}/{prefix}"
    client = boto3.client("s3")
    try:
        client.head_bucket(Bucket=bucket)
        listing = client.list_objects_v2(Bucket=bucket, Prefix=prefix + "/", MaxKeys=1)
    except NoCredentialsError:
        raise ExportError(f"dest: {url}: no AWS credentials found (set AWS_PROFILE, or run where a role "
                          "is attached)") from None
    except ClientError as err:
        code = str(err.response.get("Error", {}).get("Code", "error"))
        why = {"404": "does not exist", "NoSuchBucket": "does not exist",
               "403": "is not readable with these credentials"}.get(code, f"cannot be used ({code})")
        raise ExportError(f"dest: {url}: bucket {bucket!r} {why}") from None
    except BotoCoreError as err:
        raise ExportError(f"dest: {url}: S3 cannot be reached ({type(err).__name__})") from None
    if listing.get("KeyCount", 0):
        raise ExportError(f"dest: {url}/ already holds objects; give a new prefix")
    return client


def _export_to_s3(ckpt: _Checkpoint, url: str) -> ExportResult:
    bucket, prefix = parse_s3_url(url)
    client = _s3_client(bucket, prefix)  # before building: a bad bucket fails in a second
    shown = f"s3://{bucket}/{prefix}"
    with tempfile.TemporaryDirectory(prefix="skyrl-export-") as tmp:
        result = _build(ckpt, tmp, shown)
        _upload(client, tmp, bucket, prefix, result.files)
    return result


def _upload(client: Any, folder: str, bucket: str, prefix: str, files: tuple[str, ...]) -> None:
    from boto3.exceptions import S3UploadFailedError

    for rel in files:
        key = f"{prefix}/{rel}"
        try:
            client.upload_file(os.path.join(folder, rel), bucket, key)
        except S3UploadFailedError as err:
            raise RuntimeError(f"dest: upload of {rel} to s3://{bucket}/{key} failed: "
                               f"{' '.join(str(err).split())}") from None
