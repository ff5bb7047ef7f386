"""How much memory each training rank needs for its model state, and whether that fits a device.

>>> from skyrl_core.config import load_config
>>> est = rank_memory(load_config("quickstart"))
>>> est.role("policy").parameters                # fp32 bytes of the built-in tiny model, one worker
1629696
>>> est.problems(RankCapacity("GPU", 16 * 2**30))
[]

The estimate counts the model state only: parameters and gradients in fp32 (4 bytes each) and torch
AdamW's two fp32 states (``exp_avg``, ``exp_avg_sq``: 8 bytes) per parameter. Under ``fsdp2`` on N ranks
each rank holds 1/N of all three; under ``ddp`` each rank holds a full replica; one worker holds
everything. ``cpu_offload`` moves them to host memory. ``mixed_precision`` changes none of these (FSDP2
keeps fp32 sharded parameters, gradients and AdamW state). Not counted: activations, the all-gathered
copy of the FSDP2 unit being computed (in ``param_dtype``), AdamW's step scalar per tensor, the CUDA
context, and vLLM engines sharing a device under ``colocate_all``.

Parameter counts come from the model directory without torch: the safetensors headers when there are
weights, else ``config.json`` arithmetic for Llama-style decoders (llama, mistral, qwen2, qwen3); any
other model is "unknown" and nothing is refused.

One idea, a rank's memory against a device; its length is the per-role arithmetic of SkyRL's strategies.
"""

from __future__ import annotations

import functools
import html
import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_core.catalog import TINY_MODEL, TINY_MODEL_SHAPE

if TYPE_CHECKING:
    from skyrl_core.config import JobConfig

FP32 = 4  # bytes per fp32 value: parameters, gradients, each AdamW state
ADAMW_STATES = 2  # exp_avg, exp_avg_sq

#: GPU memory (GiB) by Ray's ``accelerator_type`` name. Where one name covers two sizes (V100 16/32,
#: A100 40/80) the larger is listed: a plan is refused only when it cannot fit.
GPU_MEMORY_GIB: dict[str, float] = {
    "T4": 16, "V100": 32, "A10G": 24, "L4": 24, "L40S": 48, "A100": 80, "A100-40G": 40, "A100-80G": 80,
    "H100": 80, "H20": 96, "H200": 141, "B200": 180,
}

#: The built-in model's shape, from the catalog (the engine builds the same; tests/contracts/test_memory.py checks
#: the vocabulary against the character tokenizer's).
TINY_QWEN2: dict[str, Any] = dict(TINY_MODEL_SHAPE)
_TINY_PATH = TINY_MODEL
_DECODERS = ("llama", "mistral", "qwen2", "qwen3")


# ----------------------------------------------------------------------------- parameter counts


@dataclass(frozen=True)
class ModelShape:
    """What the estimate knows of a model: its parameter count, and what a critic built on it drops
    (an untied LM head, ``lm_head`` parameters) and adds (a ``hidden_size`` → 1 value head)."""

    params: int
    hidden_size: int | None = None
    lm_head: int = 0
    source: str = ""

    def value_model(self) -> ModelShape:
        """The shape of the critic on this model: its body plus a one-output value head."""
        return ModelShape(self.params - self.lm_head + (self.hidden_size or 0), self.hidden_size, 0,
                          f"{self.source}, as a value model")


def decoder_params(config: dict[str, Any]) -> ModelShape | None:
    """The parameters of a Llama-style decoder from its ``config.json`` (None for other model types).

    Per layer: q/k/v/o projections (q, k, v with biases in qwen2), gate/up/down MLP, two RMSNorms (and
    qwen3's per-head q/k norms); then the embeddings, a final norm, and an LM head unless tied.

    >>> decoder_params(TINY_QWEN2).params    # Qwen2ForCausalLM(Qwen2Config(**TINY_QWEN2)) counts the same
    407424
    """
    kind = config.get("model_type")
    if kind not in _DECODERS:
        return None
    try:
        hidden, layers = int(config["hidden_size"]), int(config["num_hidden_layers"])
        heads, mlp, vocab = int(config["num_attention_heads"]), int(config["intermediate_size"]), int(config["vocab_size"])
    except (KeyError, TypeError, ValueError):
        return None
    kv_heads = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if kind == "qwen2" or config.get("attention_bias"):
        attention += q + 2 * kv + (hidden if config.get("attention_bias") else 0)
    if kind == "qwen3":
        attention += 2 * head_dim
    layer = attention + 3 * hidden * mlp + 2 * hidden
    lm_head = 0 if config.get("tie_word_embeddings", False) else vocab * hidden
    return ModelShape(vocab * hidden + layers * layer + hidden + lm_head, hidden, lm_head, "config.json")


def safetensors_params(path: str | Path) -> dict[str, int]:
    """``{tensor name: element count}`` from a ``.safetensors`` file's header (8-byte little-endian length,
    then JSON with each tensor's shape); the weights themselves are not read."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
    return {name: math.prod(info["shape"]) for name, info in header.items() if name != "__metadata__"}


def model_shape(path: str | None) -> ModelShape | None:
    """The shape of the model at ``trainer.policy.model.path`` (a local Hugging Face directory or the
    built-in tiny model), or None when it cannot be told without loading it."""
    if not path:
        return None
    if path == _TINY_PATH:
        shape = decoder_params(TINY_QWEN2)
        return None if shape is None else ModelShape(shape.params, shape.hidden_size, shape.lm_head, "built-in tiny-qwen2")
    folder = Path(path).expanduser()
    if not folder.is_dir():
        return None
    files = sorted([folder / "config.json", *folder.glob("*.safetensors")])
    stamp = tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.is_file())
    return _model_shape(stamp)


@functools.lru_cache(maxsize=64)
def _model_shape(files: tuple[tuple[str, int, int], ...]) -> ModelShape | None:
    # keyed by (file, mtime, size): the form asks on every edit, a changed model is read again
    config: dict[str, Any] = {}
    counts: dict[str, int] = {}
    for name, _, _ in files:
        try:
            if name.endswith("config.json"):
                config = json.loads(Path(name).read_text())
            else:
                counts.update(safetensors_params(name))
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            return None
    hidden = config.get("hidden_size")
    if counts:
        return ModelShape(sum(counts.values()), hidden, counts.get("lm_head.weight", 0), "safetensors header")
    return decoder_params(config)


# ----------------------------------------------------------------------------- the estimate


@dataclass(frozen=True)
class RoleMemory:
    """One role's model state on each of its ranks, in bytes (None: the model's size is unknown)."""

    role: str  # "policy", "critic" or "reference"
    layout: str  # how the state is spread: "fsdp2 over 4 ranks", "ddp over 2 ranks", "one worker", ...
    params: int | None = None  # the model's parameter count
    parameters: int | None = None
    gradients: int | None = None
    optimizer: int | None = None  # AdamW's exp_avg + exp_avg_sq
    shards: int = 1  # the ranks the state is divided over (fsdp2's N; 1: whole on every rank)
    offloaded: bool = False  # cpu_offload: the bytes live in host memory, ~0 on the device
    source: str = ""  # where the parameter count came from, or why it is unknown

    @property
    def total(self) -> int | None:
        """Parameters + gradients + optimizer state per rank."""
        if self.parameters is None:
            return None
        return self.parameters + (self.gradients or 0) + (self.optimizer or 0)

    @property
    def device_bytes(self) -> int | None:
        """Bytes per rank on its device."""
        return None if self.total is None else (0 if self.offloaded else self.total)

    @property
    def host_bytes(self) -> int | None:
        """Bytes per rank in host memory (cpu_offload)."""
        return None if self.total is None else (self.total if self.offloaded else 0)

    def parts(self, unit: float) -> str:
        """``parameters 5.8 + gradients 5.8 + AdamW 11.5`` in ``unit`` bytes."""
        names = (("parameters", self.parameters), ("gradients", self.gradients), ("AdamW", self.optimizer))
        return " + ".join(f"{name} {n / unit:.1f}" for name, n in names if n)


@dataclass(frozen=True)
class RankCapacity:
    """What one rank may hold: one device's memory, and its share of its node's host memory.

    On a CPU cluster a device is a CPU bundle, so ``device_bytes`` is the node's memory over the ranks on
    that node and host memory is the same memory. None: not known.
    """

    device: str  # "GPU" or "CPU"
    device_bytes: int | None
    host_bytes: int | None = None
    source: str = ""  # what the numbers come from: "H100", "ml.g5.12xlarge (A10G)", ...

    def __repr__(self) -> str:
        dev = "unknown" if self.device_bytes is None else size_text(self.device_bytes)
        host = "" if self.host_bytes is None or self.device == "CPU" else f", host {size_text(self.host_bytes)}"
        return f"RankCapacity({self.device} {dev}{host} per rank{f' ({self.source})' if self.source else ''})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


@dataclass(frozen=True)
class MemoryEstimate:
    """Per-rank model-state memory of every training role of a config; see :func:`rank_memory`.

    Rank 0's device holds one rank of each role: the critic's ranks share the policy's bundles and the
    frozen reference is one worker beside them, so ``device_bytes`` adds them up.
    """

    roles: tuple[RoleMemory, ...]
    policy_ranks: int
    strategy: str

    def role(self, name: str) -> RoleMemory:
        """The row of role ``name`` (KeyError when the config has no such role)."""
        for r in self.roles:
            if r.role == name:
                return r
        raise KeyError(f"no {name!r} role in this estimate; it has: {', '.join(r.role for r in self.roles)}")

    @property
    def known(self) -> bool:
        """Whether every role's model size is known."""
        return all(r.total is not None for r in self.roles)

    @property
    def device_bytes(self) -> int | None:
        """Bytes on rank 0's device (None when a size is unknown)."""
        return sum(r.device_bytes or 0 for r in self.roles) if self.known else None

    @property
    def host_bytes(self) -> int | None:
        """Bytes in host memory for rank 0 (cpu_offload; None when a size is unknown)."""
        return sum(r.host_bytes or 0 for r in self.roles) if self.known else None

    def summary(self) -> str:
        """One line: ``policy 5.8 GiB per rank (fsdp2 over 4 ranks), reference 5.8 GiB (frozen, one worker)``."""
        shown = []
        for r in self.roles:
            size = "size unknown" if r.total is None else size_text(r.total) + (" per rank" if r.role != "reference" else "")
            where = ", host memory" if r.offloaded else ""
            shown.append(f"{r.role} {size} ({r.layout}{where})")
        return ", ".join(shown) + "; activations not counted"

    @property
    def layout(self) -> str:
        """How the policy's state is spread: ``fsdp2 over 4 ranks``, ``ddp over 2 ranks`` or ``one worker``."""
        return self.roles[0].layout

    def problems(self, capacity: RankCapacity | None) -> list[str]:
        """One line per memory that cannot hold what rank 0 needs, naming the keys that change it.

        Nothing is refused when a size is unknown (the model's, or the device's).
        """
        if capacity is None or not self.known:
            return []
        found = []
        cpu = capacity.device == "CPU"  # a CPU bundle's memory is the host's: everything counts there
        need = (self.device_bytes or 0) + ((self.host_bytes or 0) if cpu else 0)
        if capacity.device_bytes is not None and need > capacity.device_bytes:
            found.append(self._too_big(need, capacity.device_bytes, capacity, host=False))
        if not cpu and capacity.host_bytes is not None and (self.host_bytes or 0) > capacity.host_bytes:
            found.append(self._too_big(self.host_bytes or 0, capacity.host_bytes, capacity, host=True))
        return found

    def _too_big(self, need: int, have: int, capacity: RankCapacity, *, host: bool) -> str:
        unit, name = _unit(max(need, have)), _UNITS[_unit(max(need, have))]
        cpu = capacity.device == "CPU"
        rows = [r for r in self.roles if (r.host_bytes if host else (r.total if cpu else r.device_bytes))]
        if len(rows) == 1:
            r = rows[0]
            what = f"the {r.role} needs {need / unit:.1f} {name} per rank ({r.parts(unit)}, {r.layout})"
        else:  # the breakdown of each would pass a problem line's 300 characters
            each = ", ".join(f"{r.role} {(r.total or 0) / unit:.1f}" for r in rows)
            what = f"rank 0 needs {need / unit:.1f} {name} ({each})"
        if host:
            keys = ["trainer.placement.policy_num_nodes", "trainer.policy.fsdp_config.cpu_offload"]
            where = f"a node's host memory has {have / unit:.1f} {name} per rank"
            allowed = ["more nodes (trainer.placement.policy_num_nodes)", "cpu_offload=false"]
        elif cpu:
            keys = ["trainer.placement.policy_num_nodes", "trainer.strategy"]
            where = f"a CPU rank has {have / unit:.1f} {name} ({capacity.source or 'node memory / ranks'})"
            allowed = ["fsdp2 over more nodes (trainer.placement.policy_num_nodes)"]
        else:
            keys = ["trainer.placement.policy_num_gpus_per_node", "trainer.strategy"]
            where = f"a GPU{f' ({capacity.source})' if capacity.source else ''} has {have / unit:.1f} {name}"
            allowed = []
            fewest = self._fewest_fsdp2_ranks(have)
            if fewest is not None and (fewest > self.policy_ranks or self.strategy != "fsdp2"):
                allowed.append(f"fsdp2 over at least {fewest} ranks {_RANKS_KEYS}")
            allowed.append("trainer.policy.fsdp_config.cpu_offload=true")
        if any(r.role == "reference" for r in rows):
            keys.append("trainer.algorithm.use_kl_loss")
            allowed.append("use_kl_loss=false")
        line = f"{', '.join(keys)}: {what} but {where}; allowed: {', or '.join(allowed)}"
        from skyrl_core.config import MAX_PROBLEM_CHARS

        return line if len(line) <= MAX_PROBLEM_CHARS else line.replace(f" {_RANKS_KEYS}", "")

    def _fewest_fsdp2_ranks(self, have: int) -> int | None:
        """The fewest fsdp2 ranks whose shards of the trained roles, beside the whole reference, fit in
        ``have`` bytes of one device (None when the reference alone does not)."""
        full = sum((r.device_bytes or 0) * r.shards for r in self.roles if r.role != "reference")
        fixed = sum(r.total or 0 for r in self.roles if r.role == "reference")
        return max(1, math.ceil(full / (have - fixed))) if have > fixed else None

    # -- display --------------------------------------------------------------------------------

    def __repr__(self) -> str:
        lines = [f"MemoryEstimate per rank, policy {self.layout} (model state only; activations not counted)"]
        for r in self.roles:
            if r.total is None:
                lines.append(f"  {r.role:<9}  size unknown ({r.source})")
                continue
            unit = _unit(r.total)
            where = "host" if r.offloaded else "device"
            lines.append(f"  {r.role:<9}  {r.params:,} params  {r.layout:<18}  {r.parts(unit)} = "
                         f"{r.total / unit:.1f} {_UNITS[unit]} on the {where}")
        if self.known and len(self.roles) > 1:
            lines.append(f"  rank 0's device: {size_text(self.device_bytes or 0)}"
                         + (f", host {size_text(self.host_bytes)}" if self.host_bytes else ""))
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = "".join(f"<th>{h}</th>" for h in ("role", "params", "layout", "parameters", "gradients",
                                                  "AdamW", "per rank", "where"))
        rows = []
        for r in self.roles:
            cells = [r.role, "unknown" if r.params is None else f"{r.params:,}", r.layout,
                     *(("—" if n is None else size_text(n)) for n in (r.parameters, r.gradients, r.optimizer, r.total)),
                     "host" if r.offloaded else "device"]
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
        foot = (f"<div>rank 0's device: {size_text(self.device_bytes or 0)}; activations not counted</div>"
                if self.known else "<div>a model's size is unknown: nothing is checked</div>")
        return (f"<div><b>Memory per rank</b> (policy {html.escape(self.layout)})"
                f"<table><tr>{head}</tr>{''.join(rows)}</table>{foot}</div>")


def _role(role: str, shape: ModelShape | None, ranks: int, strategy: str, fsdp: Any, why: str) -> RoleMemory:
    sharded = ranks > 1 and strategy == "fsdp2"
    layout = (f"{strategy} over {ranks} ranks" if ranks > 1 else "one worker")
    if shape is None:
        return RoleMemory(role, layout, source=why)
    per_rank = -(-shape.params // ranks) if sharded else shape.params  # ceil: a shard is never smaller
    return RoleMemory(role, layout, shape.params, per_rank * FP32, per_rank * FP32, per_rank * FP32 * ADAMW_STATES,
                      shards=ranks if sharded else 1, offloaded=bool(sharded and fsdp.cpu_offload), source=shape.source)


def rank_memory(cfg: JobConfig, model_params: int | None = None) -> MemoryEstimate:
    """Per-rank parameter, gradient and AdamW bytes of the policy, the critic (``gae``) and the frozen
    reference (``use_kl_loss``) of ``cfg``; ``model_params`` overrides the policy model's parameter count.

    >>> from skyrl_core.config import load_config
    >>> cfg = load_config("quickstart", overrides=["trainer.placement.policy_num_gpus_per_node=4"])
    >>> rank_memory(cfg, model_params=1_000_000).role("policy").optimizer   # 1M/4 params x 8 bytes
    2000000
    """
    from skyrl_core.config import critic_ranks, policy_ranks

    t = cfg.trainer
    strategy, ranks = str(t.strategy), policy_ranks(cfg)
    path = t.policy.model.path
    shape = ModelShape(model_params, source="given") if model_params is not None else model_shape(path)
    why = f"trainer.policy.model.path {path!r}: no config.json of a known decoder, no safetensors"
    roles = [_role("policy", shape, ranks, strategy, t.policy.fsdp_config, why)]
    if critic_ranks(cfg):
        critic_path = t.critic.model.path
        base = shape if not critic_path or critic_path == path else model_shape(critic_path)
        roles.append(_role("critic", None if base is None else base.value_model(), critic_ranks(cfg), strategy,
                           t.critic.fsdp_config, f"trainer.critic.model.path {critic_path!r}: size unknown"))
    if t.algorithm.use_kl_loss:
        roles.append(RoleMemory("reference", "frozen, one worker", None if shape is None else shape.params,
                                None if shape is None else shape.params * FP32,
                                source=why if shape is None else shape.source))
    return MemoryEstimate(tuple(roles), ranks, strategy)


# ----------------------------------------------------------------------------- capacity


def gpu_memory_bytes(accelerator_type: str) -> int | None:
    """One GPU's memory from Ray's ``accelerator_type`` name (``"H100"``, ``"A10G"``), None if unknown."""
    gib = GPU_MEMORY_GIB.get(accelerator_type.removeprefix("accelerator_type:"))
    return None if gib is None else int(gib * 2**30)


def capacity_from_nodes(nodes: list[dict[str, float]], ranks_per_node: int) -> RankCapacity | None:
    """A rank's capacity on a Ray cluster from each node's total resources (``GPU``, ``memory`` in bytes,
    ``accelerator_type:<name>``), with ``ranks_per_node`` ranks on a node (``policy_num_gpus_per_node``).

    The largest node is taken (a plan is refused only when no node can hold it). None without nodes.

    >>> capacity_from_nodes([{"CPU": 8, "GPU": 1, "memory": 32 * 2**30, "accelerator_type:A10G": 1}], 1)
    RankCapacity(GPU 24.0 GiB, host 32.0 GiB per rank (A10G))
    """
    if not nodes:
        return None
    ranks_per_node = max(1, ranks_per_node)
    gpu_nodes = [n for n in nodes if n.get("GPU", 0) > 0]
    memory = max((n.get("memory", 0) for n in gpu_nodes or nodes), default=0)
    per_rank = int(memory // ranks_per_node) if memory else None
    if not gpu_nodes:
        return RankCapacity("CPU", per_rank, per_rank,
                            f"node memory {size_text(int(memory))} / {ranks_per_node} rank(s)" if memory else "")
    known = {key.removeprefix("accelerator_type:"): gpu_memory_bytes(key)
             for n in gpu_nodes for key in n if key.startswith("accelerator_type:")}
    known = {name: size for name, size in known.items() if size}
    if not known:
        return RankCapacity("GPU", None, per_rank, "GPU memory unknown")
    name = max(known, key=lambda k: known[k] or 0)
    return RankCapacity("GPU", known[name], per_rank, name)


# ----------------------------------------------------------------------------- text

_RANKS_KEYS = "(nodes × GPUs per node)"
_UNITS = {2**30: "GiB", 2**20: "MiB", 2**10: "KiB", 1: "B"}


def _unit(n: float) -> int:
    return next(u for u in _UNITS if n >= u or u == 1)


def size_text(n: int | float) -> str:
    """``23.0 GiB``, ``1.6 MiB``: bytes in the largest binary unit that keeps a whole part."""
    unit = _unit(n)
    return f"{n / unit:.1f} {_UNITS[unit]}" if unit > 1 else f"{int(n)} B"
