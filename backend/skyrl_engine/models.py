"""Policy models: Hugging Face causal LMs from a local directory, and the built-in tiny model.

``builtin://tiny-qwen2`` is a ~0.5 M parameter Qwen2 with a character-level tokenizer and a
Qwen-style chat template, built here (no hub). From random init GRPO cannot find the arithmetic
task's signal on a CPU, so the model is warm-started by a short supervised phase on the task's
train rows (100 steps of 64; 25 on the quickstart's operands-0..4 sums, ``SFT_RECIPES``: reward 0.21-0.24
over its first 20 steps, which every ``trainer.seed`` 1..8 then raised by +0.27 to +0.56 by its 190th, under
native and portable kernels alike; 30 steps gave +0.26 to +0.49, 50 steps started at ~0.45 and left less
room), then cached under ``$SKYRL_NB_CACHE/models/<hash>/`` (default ``~/.cache/skyrl-nb``) so later runs
load it in a second. Two processes building it at once are safe: a file lock
serialises the build, and the directory appears by atomic rename.

The quickstart's warm start is the same on every CPU (``SFT_RECIPES``, recipe version 2): trained in float64 with its weights put back
on a fixed grid (multiples of 2^-20) after every step, from an integer-drawn init on that grid. The
kernels' last-bit differences (AVX2, AVX-512, torch's portable ones, MKL's paths) are ~1e-16 relative, far
below the grid's step, so every machine rounds each step to the same weights unless a value lands that close
to a rounding boundary (not seen: identical under AVX2, AVX-512 and the portable kernels;
``bench/quickstart_spread.py`` hashes the builds under two kernel sets). The weights are exact in float32.
In float32, or in float64 without the grid, those differences grew through training (float64: 1e-11
relative after 10 steps, 5e-4 after 100) until the warm start, and how much the quickstart learned,
depended on the CPU. Other tasks keep the float32 recipe (``sft_grid_bits=0``): on text2sql's 55-80
character answers the grid recipe took 133 s of CPU and reached loss 0.30 in 100 steps, float32 52 s and
0.059, so their warm starts still follow the CPU's kernels. Either way it is one model per task (rows), not
per ``trainer.seed``: seeds differ in the RL phase only.

One idea, where a policy model's local directory comes from; its length is the tiny model's reproducible build.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from skyrl_core.catalog import TINY_MODEL, TINY_MODEL_SHAPE
from skyrl_engine.cache import cache_root, file_lock
from skyrl_engine.gguf_models import SMOLLM2, gguf_model_dir, packaged_smollm2, special_token_problems

if TYPE_CHECKING:
    from skyrl_core.runs import RunWriter
    from skyrl_engine.types import PromptRow

PAD, EOS, UNK = "<|endoftext|>", "<|im_end|>", "<|unk|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
# Roles are single tokens so a short prompt stays short (char-level sequences are long enough).
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + '<|im_end|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the built-in model and its supervised warm start."""

    hidden_size: int = TINY_MODEL_SHAPE["hidden_size"]  # the catalog's shape (skyrl_core.catalog)
    num_hidden_layers: int = TINY_MODEL_SHAPE["num_hidden_layers"]
    num_attention_heads: int = TINY_MODEL_SHAPE["num_attention_heads"]
    num_key_value_heads: int = TINY_MODEL_SHAPE["num_key_value_heads"]
    intermediate_size: int = TINY_MODEL_SHAPE["intermediate_size"]
    max_position_embeddings: int = TINY_MODEL_SHAPE["max_position_embeddings"]
    sft_steps: int = 100
    sft_batch_size: int = 64
    sft_lr: float = 3e-3
    sft_label_smoothing: float = 0.0
    sft_grid_bits: int = 0  # > 0: float64, weights on multiples of 2**-sft_grid_bits (module docstring); 0: float32
    init_std: float = 0.02  # of the grid init (uniform), as Qwen2's initializer_range
    version: int = 2  # bump when the build recipe changes, so caches rebuild (2: float64 on a grid)


#: The seed of the tiny model's init and warm-start batches: one warm start per task, whatever ``trainer.seed``.
WARM_START_SEED = 42
#: The warm-start recipe for rows of one env class, where it is not the spec's default: the quickstart's sums
#: get the CPU-independent float64 grid recipe and 25 steps, since they are mostly learned by 50 (module
#: docstring); longer answers (text2sql's 55-80 characters, word problems) keep the float32 default.
SFT_RECIPES: dict[str, dict[str, int]] = {"arithmetic": {"sft_steps": 25, "sft_grid_bits": 20}}


def tiny_model_spec(rows: list[PromptRow]) -> TinyModelSpec:
    """The built-in model's recipe for warm-starting on ``rows``: the default, with ``SFT_RECIPES``' fields
    when every row has that env class."""
    classes = {row.env_class for row in rows}
    fields = SFT_RECIPES.get(classes.pop(), {}) if len(classes) == 1 else {}
    return replace(TinyModelSpec(), **fields)


def build_char_tokenizer():
    """A character-level tokenizer (printable ASCII + newline) with a compact chat template.

    ``[{"role": "user", "content": "1+2"}]`` renders as ``<|user|>1+2<|im_end|><|assistant|>``;
    the assistant's turn ends with ``<|im_end|>`` (the EOS).
    """
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    specials = [PAD, EOS, UNK, *ROLE_TOKENS]
    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token=UNK))
    core.decoder = decoders.Fuse()
    core.add_special_tokens(specials)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token=PAD, eos_token=EOS, unk_token=UNK, bos_token=None
    )
    tok.chat_template = CHAT_TEMPLATE
    tok.padding_side = "left"
    return tok


def load_tokenizer(path: str):
    """The tokenizer saved in a local model directory (pad token falls back to EOS)."""
    from transformers import AutoTokenizer, PreTrainedTokenizerFast

    config_path = os.path.join(path, "tokenizer_config.json")
    saved_class = None
    if os.path.exists(config_path):
        with open(config_path, encoding="utf-8") as f:
            saved_class = json.load(f).get("tokenizer_class")
    # the built-in char tokenizer must load as saved: AutoTokenizer would take the model type's class
    # (Qwen2Tokenizer), whose byte-level pre-tokenizer drops spaces
    tok = (PreTrainedTokenizerFast if saved_class == "TokenizersBackend" else AutoTokenizer).from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    tok.padding_side = "left"
    return tok


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja",
                   "chat_template.json", "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")
TOKENIZER_DIRS = ("additional_chat_templates",)


def copy_tokenizer_files(source: str, out: str) -> None:
    """Copy a model directory's tokenizer (files and chat templates) into ``out``."""
    for name in TOKENIZER_FILES:
        if os.path.isfile(os.path.join(source, name)):
            shutil.copyfile(os.path.join(source, name), os.path.join(out, name))
    for name in TOKENIZER_DIRS:
        if os.path.isdir(os.path.join(source, name)):
            shutil.copytree(os.path.join(source, name), os.path.join(out, name), dirs_exist_ok=True)


def copy_state_dict(state: Any, rename: Any = None) -> dict[str, Any]:
    """Detached CPU copies of a state dict's tensors (keys passed through ``rename``, which drops a key by
    returning None); tied weights (the output head and the embedding) stay one tensor, so they are saved
    and sent once."""
    copies: dict[int, Any] = {}
    out: dict[str, Any] = {}
    for key, value in state.items():
        name = rename(key) if rename is not None else key
        if name is None:
            continue
        if value.data_ptr() not in copies:
            copies[value.data_ptr()] = value.detach().cpu().clone()
        out[name] = copies[value.data_ptr()]
    return out


def load_model(path: str):
    """A float32 causal LM from a local directory, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="eager")
    model.eval()
    return model


def encode_prompt(tokenizer, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of a chat prompt with the generation prompt appended."""
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, dict) or hasattr(ids, "input_ids"):
        ids = ids["input_ids"]
    return list(ids)


def warm_start_answer(row: PromptRow) -> str:
    """What the warm start teaches for ``row``: ``extra_info.warm_start_answer`` (an answer in the
    env's format, e.g. text2sql's tags) when the row has one, else the ground truth."""
    info = row.extras.get("extra_info") if isinstance(row.extras, dict) else None
    answer = info.get("warm_start_answer") if isinstance(info, dict) else None
    return str(answer) if answer else str(row.ground_truth)


def _rows_fingerprint(rows: list[PromptRow]) -> str:
    h = hashlib.sha256()
    for row in rows:
        h.update(json.dumps([row.prompt, str(row.ground_truth)], sort_keys=True).encode())
        if warm_start_answer(row) != str(row.ground_truth):
            h.update(warm_start_answer(row).encode())
    return h.hexdigest()[:16]


def tiny_model_dir(rows: list[PromptRow], seed: int = WARM_START_SEED, spec: TinyModelSpec | None = None) -> str:
    """The cache directory the warm-started tiny model for these rows (and warm-start seed) lives in; the key
    holds the recipe (``spec``, default ``tiny_model_spec(rows)``, its ``version`` included), so a changed
    recipe never reuses an old build."""
    spec = tiny_model_spec(rows) if spec is None else spec
    key = json.dumps({"spec": asdict(spec), "seed": seed, "data": _rows_fingerprint(rows)}, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    return os.path.join(cache_root(), "models", f"tiny-qwen2-{digest}")


def _new_tiny_model(tokenizer, spec: TinyModelSpec, seed: int):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        intermediate_size=spec.intermediate_size,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
        attention_dropout=0.0,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(config)


def grid_init(model, spec: TinyModelSpec, seed: int) -> None:
    """Re-draw ``model``'s matrices (every parameter of 2+ dimensions) as integers times ``2**-sft_grid_bits``,
    uniform with standard deviation ``spec.init_std``, from numpy's integer generator: the same bits on every
    CPU (torch's ``normal_`` draws differently under different vector kernels). Norms and biases keep their
    constant init."""
    import numpy as np
    import torch

    rng = np.random.default_rng(seed)
    half_width = round(spec.init_std * 3**0.5 * 2**spec.sft_grid_bits)
    with torch.no_grad():
        for _, param in sorted(model.named_parameters()):
            if param.dim() >= 2:
                ints = rng.integers(-half_width, half_width + 1, size=tuple(param.shape))
                param.copy_(torch.from_numpy(ints.astype(np.float64) * 2.0**-spec.sft_grid_bits))


def _snap_to_grid(model, bits: int) -> None:
    """Round every parameter to the nearest multiple of ``2**-bits`` (exact: scaling by a power of two)."""
    import torch

    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.round(param * 2.0**bits) * 2.0**-bits)


def supervised_warm_start(model, tokenizer, rows: list[PromptRow], spec: TinyModelSpec, seed: int) -> list[float]:
    """Train on ``prompt → answer<|im_end|>`` for ``spec.sft_steps`` steps; return the losses.

    Only the answer tokens carry loss; batches come from a generator seeded by ``seed``. With
    ``spec.sft_grid_bits`` the same on every CPU (module docstring): the arithmetic is float64 and the weights go
    back on the grid after every step; ``model`` ends in float32 either way.
    """
    import torch

    examples = []
    for row in rows:
        prompt_ids = encode_prompt(tokenizer, row.prompt)
        answer_ids = tokenizer.encode(warm_start_answer(row), add_special_tokens=False) + [tokenizer.eos_token_id]
        examples.append((prompt_ids, answer_ids))
    gen = torch.Generator().manual_seed(seed)
    bits = spec.sft_grid_bits
    if bits:
        model.to(torch.float64)
        _snap_to_grid(model, bits)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_lr, weight_decay=0.0)
    model.train()
    losses = []
    for _ in range(spec.sft_steps):
        idx = torch.randint(len(examples), (spec.sft_batch_size,), generator=gen).tolist()
        seqs = [examples[i][0] + examples[i][1] for i in idx]
        width = max(len(s) for s in seqs)
        input_ids_BL = torch.full((len(seqs), width), tokenizer.pad_token_id, dtype=torch.long)
        labels_BL = torch.full((len(seqs), width), -100, dtype=torch.long)
        mask_BL = torch.zeros((len(seqs), width), dtype=torch.long)
        for b, i in enumerate(idx):
            p, a = examples[i]
            input_ids_BL[b, : len(p) + len(a)] = torch.tensor(p + a)
            labels_BL[b, len(p) : len(p) + len(a)] = torch.tensor(a)
            mask_BL[b, : len(p) + len(a)] = 1
        logits_BLV = model(input_ids=input_ids_BL, attention_mask=mask_BL).logits[:, :-1]
        loss = torch.nn.functional.cross_entropy(
            logits_BLV.reshape(-1, logits_BLV.shape[-1]),
            labels_BL[:, 1:].reshape(-1),
            ignore_index=-100,
            label_smoothing=spec.sft_label_smoothing,
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if bits:
            _snap_to_grid(model, bits)
        losses.append(loss.item())
    model.eval()
    limit = 2.0 ** (24 - bits)  # grid values below this are exact in float32's 24-bit mantissa
    largest = max(p.abs().max().item() for p in model.parameters())
    if bits and largest >= limit:
        raise RuntimeError(f"tiny model warm start: a weight reached {largest}, beyond float32's exact range "
                           f"{limit} for sft_grid_bits={spec.sft_grid_bits}")
    model.to(torch.float32)
    return losses


def model_build_note(path: str, rows: list[PromptRow] | None, seed: int) -> str | None:
    """What a person reads while ``resolve_model_path`` builds a model the cache does not hold yet, else None.
    ``seed``: the run's ``trainer.seed``, which the tiny model no longer depends on (``WARM_START_SEED``).

    The tiny model is trained for tens of seconds on a cold cache, once; saying so keeps a long "model
    load" from looking stuck.
    """
    if path != TINY_MODEL or not rows:
        return None
    if os.path.exists(os.path.join(tiny_model_dir(rows), "model.safetensors")):
        return None
    home = os.path.expanduser("~")
    where = cache_root()
    where = "~" + where[len(home):] if home not in ("", "/") and where.startswith(home + os.sep) else where
    return f"building the tiny model (one-time, cached in {where})"


def build_tiny_model(rows: list[PromptRow], seed: int = WARM_START_SEED, spec: TinyModelSpec | None = None) -> str:
    """Build (or reuse from cache) the warm-started tiny model; return its local directory. ``seed``: of its
    init and warm-start batches (the quickstart's is ``WARM_START_SEED`` whatever ``trainer.seed``); ``spec``:
    default ``tiny_model_spec(rows)``."""
    import torch

    spec = tiny_model_spec(rows) if spec is None else spec
    final_dir = tiny_model_dir(rows, seed, spec)
    if os.path.exists(os.path.join(final_dir, "model.safetensors")):
        return final_dir
    with file_lock(final_dir + ".lock"):
        if os.path.exists(os.path.join(final_dir, "model.safetensors")):
            return final_dir  # another process built it while we waited
        tokenizer = build_char_tokenizer()
        model = _new_tiny_model(tokenizer, spec, seed)
        if spec.sft_grid_bits:
            grid_init(model, spec, seed)
        with torch.random.fork_rng():
            losses = supervised_warm_start(model, tokenizer, rows, spec, seed)
        tmp = tempfile.mkdtemp(prefix=".build-", dir=os.path.dirname(final_dir))
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()
            model.save_pretrained(tmp)
            tokenizer.save_pretrained(tmp)
            with open(os.path.join(tmp, "warm_start.json"), "w") as f:
                json.dump({"spec": asdict(spec), "seed": seed, "torch": torch.__version__,
                           "recipe": ("float64 on a 2**-sft_grid_bits grid: the same weights on every CPU"
                                      if spec.sft_grid_bits else "float32: follows the CPU's float kernels"),
                           "sft_losses": losses}, f)
            os.rename(tmp, final_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final_dir


def resolve_model_path(path: str, train_rows: list[PromptRow] | None, seed: int) -> str:
    """A local Hugging Face directory for ``trainer.policy.model.path``: a directory itself (its EOS checked
    against its config), the built tiny model, or a GGUF file / the packaged SmolLM2 converted once into
    the model cache (gguf_models.py). ``seed``: the run's ``trainer.seed``; no built-in model depends on it
    (the tiny model's warm start is one per task, ``WARM_START_SEED``)."""

    if path == TINY_MODEL:
        if not train_rows:
            raise ValueError(f"{TINY_MODEL} is warm-started on the train data, but data.train_data is empty")
        return build_tiny_model(train_rows)
    if path == SMOLLM2:
        return gguf_model_dir(packaged_smollm2())
    if path.startswith("builtin://"):
        raise ValueError(f"trainer.policy.model.path: unknown built-in model {path!r}; allowed: {TINY_MODEL}, {SMOLLM2}")
    path = os.path.expanduser(path)
    if path.endswith(".gguf"):
        return gguf_model_dir(path)
    if not os.path.isdir(path):
        raise FileNotFoundError(f"trainer.policy.model.path: {path} is not a local model directory or .gguf file")
    problems = special_token_problems(path, load_tokenizer(path))
    if problems:
        raise ValueError(problems[0])
    return path


def param_count(model: Any) -> int:
    """Number of parameters (for logs)."""
    return sum(p.numel() for p in model.parameters())


def keep_tokenizer(model_path: str, writer: RunWriter) -> None:
    """Copy the model's ``tokenizer.json`` into ``<run_dir>/tokenizer/``: the inspector decodes tokens with it."""
    source = os.path.join(model_path, "tokenizer.json")
    if os.path.isfile(source):
        with open(source, "rb") as f:
            writer.put_file("tokenizer/tokenizer.json", f.read())
