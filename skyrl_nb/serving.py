"""Serve an export, a run's checkpoint or a model with vLLM's OpenAI-compatible server on the cluster.

>>> srv = skyrl_nb.serve(job.export("~/models/my-run"), cluster)       # doctest: +SKIP
>>> srv.client().chat([{"role": "user", "content": "What is 17 + 25?"}])["choices"][0]["message"]["content"]
>>> srv.stop()

The server runs as a Ray job on the cluster (``python -m skyrl_engine.serve``, submitted as training jobs are: the
bearer token, the engine's code shipped or installed), which finds the model where the job runs (a run's checkpoint
exported there first) and starts ``vllm.entrypoints.openai.api_server`` with the Python that has vLLM (the same one
``backend: vllm`` training uses). A Ray job and not a Ray Serve deployment: vLLM's own server, unchanged, in its own
Python (on CPU machines vLLM lives in an env of its own, without Ray Serve), with the job's logs and stop, and
nothing to install on the cluster beyond what ``backend: vllm`` training needs.

One idea, a served model as a handle the notebook holds: :func:`serve` submits, :class:`Server` waits, talks,
shows and stops; :class:`OpenAIClient` is the small client used when the ``openai`` package is not installed.
"""

from __future__ import annotations

import hashlib
import html
import json
import os
import re
import secrets
import shlex
import socket
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

__all__ = ["OpenAIClient", "ServeError", "Server", "serve"]

MARKER = "skyrl_nb_serve"  # the engine's JSON line with the server's host, port and names (skyrl_engine.serve)
ERROR_MARKER = "skyrl_nb_serve_error"
META_SERVE = "skyrl_nb_serve"
LORA_MODES = ("auto", "adapter", "merged")
BACKENDS = ("vllm",)
#: vLLM flags serve() sets itself; engine_args may not name them.
_RESERVED = {"model": "the source", "host": "host=", "port": "port=", "served_model_name": "name=",
             "lora_modules": "lora=", "enable_lora": "lora=", "api_key": "api_key=", "tokenizer": "the export"}
_ENDED = ("SUCCEEDED", "FAILED", "STOPPED")


class ServeError(ValueError):
    """A model that cannot be served, or a server that did not come up: one line saying why and what would work."""


def serve(export_or_run: Any, cluster: Any = None, *, step: int | None = None, lora: str = "auto",
          backend: str = "vllm", port: int | None = None, name: str | None = None, host: str | None = None,
          api_key: str | None = "auto", runtime_env: dict[str, Any] | None = None, wait: bool = True,
          timeout: float = 900.0, **engine_args: Any) -> Server:
    """Start vLLM's OpenAI-compatible server for ``export_or_run`` on ``cluster``; returns its :class:`Server`.

    ``export_or_run``: an export folder (``job.export(...)``, local or ``s3://``), a ``Job`` / ``RunReader`` / run
    folder or URL (its checkpoint ``step``, default the latest, exported on the cluster first), a model directory or
    a built-in model. ``cluster``: where it runs (default: the ``Job``'s own). ``lora``: ``auto``
    serves a LoRA export as its adapter on the run's base model (``adapter``) and anything else as its weights;
    ``merged`` serves the merged weights. ``port``: default a free one on the node. ``name``: what clients ask for
    (default the run's or folder's name). ``host``: what the server binds (default 127.0.0.1 on a local cluster, else
    0.0.0.0, then with a random ``api_key`` the client carries). ``engine_args`` are vLLM server flags
    (``dtype="float32"`` -> ``--dtype float32``, ``max_model_len=2048``, ``enforce_eager=True``). With ``wait`` it
    returns once the server answers (``Server.wait_ready(timeout)``), stopping it if it does not.
    Refused in one line (:class:`ServeError`): no export or run there, a run with no checkpoint (at ``step``),
    vLLM missing on the cluster, the port taken, a bad argument.
    """
    from skyrl_nb.cluster.shipping import ray_info_quiet

    if backend not in BACKENDS:
        raise ServeError(f"backend: {backend!r} is not supported; allowed: {', '.join(BACKENDS)}")
    if lora not in LORA_MODES:
        raise ServeError(f"lora: {lora!r} is not allowed; allowed: {', '.join(LORA_MODES)}")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        raise ServeError(f"port: {port!r} is not a TCP port; give 1-65535, or None for a free one")
    if api_key is not None and (not isinstance(api_key, str) or not api_key.strip()):
        raise ServeError(f"api_key: {api_key!r} is not allowed; give a string, 'auto' (a random one when the server "
                         "binds beyond this machine) or None (none)")
    flags = vllm_flags(engine_args)
    model, cluster = _find(export_or_run, step, cluster)
    name = name or model.name
    bind = host or ("127.0.0.1" if cluster.runs_here else "0.0.0.0")
    if lora == "adapter" and model.kind == "export" and _sees(cluster, model.location) \
            and not os.path.isdir(os.path.join(os.path.expanduser(model.location), "adapter")):
        raise ServeError(f"lora: 'adapter' but {model.location} has no LoRA adapter (no adapter/ folder: the run did "
                         "not train LoRA); leave lora='auto' to serve its weights")
    if port is not None and cluster.runs_here:
        problem = _port_problem(bind, port)
        if problem:
            raise ServeError(problem)
    env = dict(runtime_env or {})
    env_vars = {"PYTHONUNBUFFERED": "1", **(env.get("env_vars") or {})}
    if "SKYRL_VLLM_PYTHON" not in env_vars:  # a Python named for the job is checked by the job itself
        from skyrl_nb.cluster.vllm_check import vllm_problem

        problem = vllm_problem(cluster)
        if problem:
            raise ServeError(f"backend: 'vllm': {problem}; install it where the cluster's jobs run: pip install vllm "
                             "(GPU), scripts/make_vllm_env.sh (CPU), or name its Python in "
                             "runtime_env={'env_vars': {'SKYRL_VLLM_PYTHON': ...}}")
    key = (secrets.token_urlsafe(24) if bind not in ("127.0.0.1", "localhost") else None) if api_key == "auto" \
        else api_key
    if key:  # only its hash travels (the name skyrl_engine.serve_auth.KEY_HASH_ENV): runtime_env is public
        env_vars["SKYRL_SERVE_KEY_SHA256"] = hashlib.sha256(key.encode("utf-8")).hexdigest()
    env["env_vars"] = env_vars
    from skyrl_nb.cluster.versions import check_versions

    code = cluster.engine_code()
    check_versions(cluster, code)  # the cluster's Ray and Python against the shipped engine's, as a launch checks
    code.apply(env)
    args = ["--kind", model.kind, "--location", model.location, "--lora", lora, "--name", name, "--host", bind]
    if model.step is not None:
        args += ["--step", str(model.step)]
    if port is not None:
        args += ["--port", str(port)]
    entrypoint = " ".join(shlex.quote(a) for a in [cluster.python, "-m", "skyrl_engine.serve", *args, "--", *flags])
    submission_id = f"skyrl-nb-serve-{uuid.uuid4().hex[:10]}"
    submission: dict[str, Any] = {"entrypoint": entrypoint, "submission_id": submission_id, "runtime_env": env,
                                  "metadata": {META_SERVE: name}}
    gpus = _cluster_gpus(cluster)
    if gpus:  # the server's node must have the GPUs its engine uses
        submission["entrypoint_num_gpus"] = int(engine_args.get("tensor_parallel_size") or 1)
    with ray_info_quiet():
        cluster._submit_with_retry(**submission)
    server = Server(cluster, submission_id, name, source=model.source, api_key=key)
    if wait:
        try:
            server.wait_ready(timeout)
        except (TimeoutError, KeyboardInterrupt):
            server.stop()  # nothing half-started stays behind
            raise
    return server


def vllm_flags(engine_args: dict[str, Any]) -> list[str]:
    """vLLM server flags for ``engine_args``: ``max_model_len=512`` -> ``--max-model-len 512``, True -> the flag
    alone, False -> ``--no-<flag>``, a list -> the flag and its items, a dict -> JSON; None leaves the flag out."""
    flags: list[str] = []
    for key, value in engine_args.items():
        if key in _RESERVED:
            raise ServeError(f"engine_args: {key!r} is set by serve() ({_RESERVED[key]}); leave it out")
        flag = "--" + key.replace("_", "-")
        if value is None:
            continue
        if value is True:
            flags.append(flag)
        elif value is False:
            flags.append("--no-" + key.replace("_", "-"))
        elif isinstance(value, (list, tuple)):
            flags += [flag, *map(str, value)]
        elif isinstance(value, dict):
            flags += [flag, json.dumps(value)]
        else:
            flags += [flag, str(value)]
    return flags


def _sees(cluster: Any, path: str) -> bool:
    from skyrl_core.store import is_url

    return not is_url(path) and (cluster.runs_here or cluster._under_shared(path))


def _find(source: Any, step: int | None, cluster: Any) -> tuple[Any, Any]:
    """``(EvalModel, cluster)``: what ``source`` is (kind, location, step, name), found as ``evaluate`` finds its
    models, and the cluster to serve on (``cluster``, else the Job's own)."""
    from skyrl_core.config import ConfigError
    from skyrl_nb.eval_models import find_models

    if step is not None and (isinstance(step, bool) or not isinstance(step, int) or step < 0):
        raise ServeError(f"step: {step!r} is not a checkpoint step; give a global step >= 0, or None for the latest")
    given = (source, step) if step is not None else source
    try:
        found = find_models(given, sees_here=lambda path: cluster is None or cluster.runs_here
                            or cluster._under_shared(path))[0]
    except ConfigError as err:
        line = "; ".join(err.problems)
        raise ServeError("export_or_run:" + line.removeprefix("models:")) from None
    cluster = cluster or found.cluster
    if cluster is None:
        raise ServeError("cluster: give the cluster to serve on (skyrl_nb.cluster.local(), connect(...)); "
                         f"{found.model.source!r} is not a Job that names one")
    from skyrl_nb.eval_jobs import _check_locations

    try:  # a folder on this notebook's disk the cluster cannot see is refused here, as evaluate refuses it
        _check_locations(cluster, [found])
    except ConfigError as err:
        raise ServeError("export_or_run:" + "; ".join(err.problems).removeprefix("models:")) from None
    return found.model, cluster


def _port_problem(host: str, port: int) -> str | None:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError as err:
            return f"port: {port} is taken on this machine ({err.strerror or err}); give another, or port=None for a free one"
    return None


def _cluster_gpus(cluster: Any) -> float:
    try:
        return float(cluster.resources().get("GPU") or 0)
    except Exception:  # noqa: BLE001 - an unreadable node list: place the server as Ray would by default
        return 0.0


def _port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Server:
    """A model served by vLLM's OpenAI server as a Ray job on ``cluster`` (see :func:`serve`).

    ``url`` is the ``/v1`` base URL (on a local cluster ``http://127.0.0.1:<port>/v1``; on a cluster elsewhere the
    node's address, which this notebook reaches only on the same network: docs/serve.md), ``model`` the name to ask
    for, ``models`` every name served (with an adapter: the trained model and its base). ``client()`` talks to it;
    ``stop()`` (or leaving a ``with`` block) stops the job and makes sure no server process is left.
    """

    def __init__(self, cluster: Any, submission_id: str, model: str, *, source: str = "", api_key: str | None = None):
        self.cluster = cluster
        self.submission_id = submission_id
        self.model = model
        self.source = source
        self._api_key = api_key
        self._info: dict[str, Any] | None = None
        self._ready = False
        self._stopped = False
        self._tree: dict[int, float | None] = {}  # pid -> start time, of the server's processes (local cluster)

    # -- what the job said ----------------------------------------------------------------------------------

    def _job_state(self) -> str:
        status = self.cluster.client.get_job_status(self.submission_id)
        return str(getattr(status, "value", status)).upper()

    def logs(self, tail: int | None = None) -> str:
        """The server job's output so far (the engine's lines, then vLLM's); the last ``tail`` lines when given."""
        text = self.cluster.client.get_job_logs(self.submission_id) or ""
        return text if tail is None else "\n".join(text.splitlines()[-tail:] if tail > 0 else [])

    def _marked(self, text: str, marker: str) -> Any:
        for line in reversed(text.splitlines()):
            if marker in line:
                try:
                    found = json.loads(line[line.index("{"):])
                except ValueError:
                    continue
                if isinstance(found, dict) and marker in found:
                    return found[marker]
        return None

    @property
    def info(self) -> dict[str, Any]:
        """What the job reported when it started the server: host, port, models, mode (adapter/merged), pids."""
        if self._info is None:
            found = self._marked(self.logs(), MARKER)
            if isinstance(found, dict):
                self._info = found
        return dict(self._info or {})

    @property
    def models(self) -> list[str]:
        return list(self.info.get("models") or [self.model])

    @property
    def url(self) -> str | None:
        """The OpenAI base URL (``.../v1``); None until the job has started the server."""
        info = self.info
        if not info:
            return None
        host = "127.0.0.1" if self.cluster.runs_here else str(info.get("host"))
        return f"http://{host}:{info['port']}/v1"

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _answers(self) -> bool:
        try:
            req = urllib.request.Request(f"{self.url}/models", headers=self._headers())
            with urllib.request.urlopen(req, timeout=5) as resp:
                return resp.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def _ended_line(self, state: str) -> str:
        text = self.logs()
        refused = self._marked(text, ERROR_MARKER)
        if isinstance(refused, str):
            return refused
        return f"the server's job {self.submission_id} ended {state.lower()} before it answered: {last_error(text)}"

    # -- lifecycle ------------------------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 900.0, poll_s: float = 1.0) -> Server:
        """Block until the server answers ``GET /v1/models``; returns self. :class:`ServeError` (one line) when its
        job ends first (the model, port or vLLM refused there), ``TimeoutError`` after ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not self._ready:
            state = self._job_state()
            if state in _ENDED:
                raise ServeError(self._ended_line(state))
            if self.info and self._answers():
                self._ready = True
                self._remember_processes()
                break
            if time.monotonic() > deadline:
                tail = " | ".join(self.logs(tail=3).splitlines())[-300:]
                raise TimeoutError(f"the server {self.model} did not answer within {timeout:.0f} s (job "
                                   f"{self.submission_id}); its log ends: {tail}")
            time.sleep(poll_s)
        return self

    def _remember_processes(self) -> None:
        """The server's processes (local cluster: this machine's ``/proc``), so :meth:`stop` can check they end."""
        from skyrl_core import procs

        if not self.cluster.runs_here or not procs.can_see_processes():
            return
        todo = [int(self.info["pid"])]
        while todo:
            pid = todo.pop()
            self._tree[pid] = procs.started_at(pid)
            todo.extend(procs.children_of(pid))

    @property
    def processes(self) -> list[int]:
        """The server's process ids as seen when it became ready (local cluster; [] elsewhere)."""
        return sorted(self._tree)

    def status(self) -> str:
        """``starting``, ``ready``, ``stopped``, ``failed`` or ``ended`` (the server exited on its own)."""
        from skyrl_core.choices import RunState

        try:
            state = self._job_state()
        except Exception as err:  # noqa: BLE001 - an unreachable cluster
            return f"unknown ({type(err).__name__})"
        if state in _ENDED:
            return {"STOPPED": RunState.STOPPED.value, "FAILED": RunState.FAILED.value}.get(state, "ended")
        return "ready" if self._ready or (self.info and self._answers()) else "starting"

    def stop(self, timeout: float = 60.0) -> bool:
        """Stop the server's job and make sure its processes are gone and its port closed (on a local cluster its
        processes are checked, and any left killed); True when it was running. Raises ``RuntimeError`` (one line)
        when the server still answers after ``timeout`` s."""
        from skyrl_core import procs

        was_running = self._job_state() not in _ENDED
        if was_running:
            self.cluster.client.stop_job(self.submission_id)
        deadline = time.monotonic() + timeout
        while self._job_state() not in _ENDED and time.monotonic() < deadline:
            time.sleep(0.2)
        info = self.info
        left = self._left_processes(procs, deadline)
        for pid in left:  # ours (same start time), outliving their job: end them
            try:
                os.kill(pid, 9)
            except OSError:
                pass
        left = self._left_processes(procs, time.monotonic() + 5)
        host = "127.0.0.1" if self.cluster.runs_here else str(info.get("host", ""))
        port = info.get("port")
        while port and _port_open(host, int(port)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if left or (port and _port_open(host, int(port))):
            raise RuntimeError(f"the server {self.model} (job {self.submission_id}) is still there after stop: "
                               + (f"processes {left}" if left else f"{host}:{port} still answers"))
        self._stopped, self._ready = True, False
        return was_running

    def _left_processes(self, procs: Any, deadline: float) -> list[int]:
        def ours(pid: int) -> bool:
            return os.path.exists(f"/proc/{pid}") and procs.started_at(pid) == self._tree[pid] \
                and not _zombie(pid)

        while any(ours(p) for p in self._tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        return [p for p in self._tree if ours(p)]

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- talking to it ---------------------------------------------------------------------------------------

    def client(self, kind: str = "auto") -> Any:
        """An OpenAI-compatible client for this server: ``openai.OpenAI`` when the ``openai`` package is installed
        (``kind="auto"`` or ``"openai"``), else (or ``kind="builtin"``) :class:`OpenAIClient`."""
        if kind not in ("auto", "openai", "builtin"):
            raise ServeError(f"kind: {kind!r} is not allowed; allowed: auto, openai, builtin")
        url = self.url
        if url is None:
            raise ServeError(f"the server {self.model} has not started yet; call wait_ready() first")
        if kind != "builtin":
            try:
                import openai
            except ImportError:
                if kind == "openai":
                    raise ServeError("kind: 'openai' needs the openai package (pip install openai)") from None
            else:
                return openai.OpenAI(base_url=url, api_key=self._api_key or "EMPTY")
        return OpenAIClient(url, api_key=self._api_key, model=self.model)

    # -- display ---------------------------------------------------------------------------------------------

    def _mode(self) -> str:
        info = self.info
        if info.get("mode") == "adapter":
            return f"LoRA adapter on {info.get('base')}"
        return "merged weights" if info else "?"

    def __repr__(self) -> str:
        return (f"Server(model={self.model!r}, url={self.url!r}, status={self.status()!r}, "
                f"serving={self._mode()!r}, job={self.submission_id!r})")

    def _repr_html_(self) -> str:
        url = self.url or "(starting)"
        jobs = f"{self.cluster.dashboard_url.rstrip('/')}/#/jobs/{self.submission_id}"
        rows = [("model", f"<code>{html.escape(self.model)}</code>"),
                ("models", html.escape(", ".join(self.models))),
                ("url", f"<code>{html.escape(url)}</code>"), ("status", html.escape(self.status())),
                ("serving", html.escape(self._mode())), ("source", f"<code>{html.escape(str(self.source))}</code>"),
                ("job", f'<a href="{html.escape(jobs)}" target="_blank">{html.escape(self.submission_id)}</a>'),
                ("auth", "API key (hidden)" if self._api_key else "none (bound to this machine)")]
        body = "".join(f"<tr><td style='text-align:left;padding-right:1em'><b>{k}</b></td>"
                       f"<td style='text-align:left'>{v}</td></tr>" for k, v in rows)
        return f"<div><b>Server</b> (vLLM, OpenAI API)<table>{body}</table></div>"


def last_error(text: str) -> str:
    """The last ``...Error: ...`` line of a log (else its last line), up to 300 characters; a pydantic error's count
    line ("1 validation error for ModelConfig", vLLM's refusal of its settings) with the line that says which."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    errors = [i for i, line in enumerate(lines) if "Error" in line.split(":", 1)[0]]
    if not errors:
        return (lines or ["no output"])[-1][:300]
    at = errors[-1]
    found = lines[at]
    if re.search(r"\d+ validation errors? for ", found) and at + 1 < len(lines):
        found += " " + lines[at + 1 + (at + 2 < len(lines) and lines[at + 1].isidentifier())]
    return found[:300]


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


class OpenAIClient:
    """A small OpenAI-compatible client over ``urllib`` (used when the ``openai`` package is not installed).

    >>> c = server.client()                                                     # doctest: +SKIP
    >>> c.completions("2 + 2 =", max_tokens=4)["choices"][0]["text"]
    >>> c.chat([{"role": "user", "content": "Hi"}])["choices"][0]["message"]["content"]

    Extra keyword arguments go into the request body as they are (vLLM's own too: ``return_token_ids=True``,
    ``logprobs=1``, ``seed=0``). Answers are the server's JSON as dicts.
    """

    def __init__(self, base_url: str, api_key: str | None = None, model: str | None = None, timeout: float = 300.0):
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self._api_key = api_key

    def _request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        headers = {"Content-Type": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as err:
            try:
                said = json.loads(err.read()).get("error", {})
                said = said.get("message", said) if isinstance(said, dict) else said
            except ValueError:
                said = err.reason
            raise ServeError(f"{path}: the server answered {err.code}: {' '.join(str(said).split())[:300]}") from None

    def models(self) -> list[str]:
        """The names the server serves."""
        return [m["id"] for m in self._request("/models").get("data", [])]

    def completions(self, prompt: str | list[int], max_tokens: int = 64, temperature: float = 0.0, *,
                    model: str | None = None, **params: Any) -> dict[str, Any]:
        """``POST /v1/completions``: a text (or token-id) prompt, continued."""
        return self._request("/completions", {"model": model or self.model, "prompt": prompt,
                                              "max_tokens": max_tokens, "temperature": temperature, **params})

    def chat(self, messages: list[dict[str, str]], max_tokens: int = 256, temperature: float = 0.0, *,
             model: str | None = None, **params: Any) -> dict[str, Any]:
        """``POST /v1/chat/completions``: chat messages through the model's chat template, answered."""
        return self._request("/chat/completions", {"model": model or self.model, "messages": messages,
                                                   "max_tokens": max_tokens, "temperature": temperature, **params})

    def __repr__(self) -> str:
        return f"OpenAIClient(url={self.base_url!r}, model={self.model!r})"

    def _repr_html_(self) -> str:
        return f"<code>{html.escape(repr(self))}</code>"
