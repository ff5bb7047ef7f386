"""The embedded local cluster: a Ray head in its own process group, started (or reused) by `local()`.

The head runs `ray start --head --block` as a child process in a new session, with a short private
`--temp-dir` (`<tmp>/skyrl-<uid>/<8 hex>`: Ray's AF_UNIX socket paths under it must stay within
107 bytes, which a temp dir under `$HOME` does not promise), every port on 127.0.0.1 unless
`expose=True`, token auth forced on (`RAY_AUTH_MODE=token` and `RAY_AUTH_TOKEN_PATH` pointing at a
0600 file under the user's config dir) and usage stats off. A state file in `~/.cache/skyrl-nb/ray`
lets a later kernel reuse the same head. While the head starts, its daemons and Ray's logs are
watched, so a head that cannot come up fails within seconds, quoting the cause from Ray's logs, and
each stage it reaches is said as it happens (`StartProgress`: a small widget in JupyterLab, a line of text
under papermill). `shutdown()` stops running jobs, then signals the head's process group (and nothing else).

One idea, the local head's life (start, reuse, stop); its folders and start-up watch live in local_dirs and local_start.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from skyrl_core import procs
from skyrl_core.choices import RunState
from skyrl_core.runs import atomic_write_text
from skyrl_nb.cluster.addresses import display_dashboard_url, read_token_file
from skyrl_nb.cluster.base import Cluster
from skyrl_nb.cluster.local_dirs import (
    SOCKET_PATH_LIMIT,
    STATE_FILE,
    cache_dir,
    check_temp_dir,
    config_dir,
    default_temp_dir,
    ensure_token,
    process_tmpdir,
    socket_path_bytes,
    writable_dir,
)
from skyrl_nb.cluster.local_start import _FOR_GOOD, _PY_ERROR, START_ATTEMPTS, StartProgress, _StartWatch

# what this module offered before its folders and its start-up watch got modules of their own
__all__ = ["SOCKET_PATH_LIMIT", "START_ATTEMPTS", "STATE_FILE", "LocalCluster", "StartProgress", "cache_dir", "check_temp_dir",
           "config_dir", "default_temp_dir", "ensure_token", "local", "process_tmpdir", "socket_path_bytes", "writable_dir"]

def _free_ports(n: int) -> list[int]:
    socks, ports = [], []
    try:
        for _ in range(n):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


class LocalCluster(Cluster):
    """A Ray head on this machine, owned by skyrl-nb (see `local()`).

    `temp_dir` is Ray's temp dir (sessions, logs, sockets); `state_path` the file that lets a later
    kernel reuse the head; `exposed` whether its ports listen beyond 127.0.0.1.
    """

    runs_here = True
    #: the head runs this kernel's own interpreter, which imports the installed engine
    code = "installed"

    def __init__(self, address: str, token: str, *, temp_dir: Path, pid: int, num_cpus: int,
                 log_path: Path, name: str = "local", state_path: Path | None = None,
                 exposed: bool = False) -> None:
        super().__init__(address, token, name=name, dashboard_url=display_dashboard_url(address))
        self.python = sys.executable
        self.temp_dir = temp_dir
        self.pid = pid
        self.num_cpus = num_cpus
        self.log_path = log_path
        self.state_path = state_path or temp_dir / STATE_FILE
        self.exposed = exposed

    @property
    def running(self) -> bool:
        """Whether the head process is still alive."""
        return procs.alive(self.pid)

    def shutdown(self, timeout: float = 15.0, grace: float = 3.0) -> None:
        """Stop running jobs (waiting up to ``timeout`` s for them to end, so each run records how it
        ended), then the head's process group: SIGTERM, and SIGKILL for what is left after ``grace`` s.
        The state file goes too.

        ``ray start --block`` and the GCS never exit on SIGTERM by themselves (the group waited out any
        grace, 15 s before; docs/benchmarks.md), so the grace is short: the jobs have ended by then, and
        the head's state is thrown away with it.
        """
        if self.running:
            try:
                stopping = [job for job in self.jobs() if job.status() in (RunState.PENDING, RunState.RUNNING)]
                for job in stopping:
                    job.stop()
                deadline = time.time() + timeout
                while stopping and time.time() < deadline:
                    time.sleep(0.2)
                    stopping = [job for job in stopping if job.status() in (RunState.PENDING, RunState.RUNNING)]
            except Exception:  # the head may already be half gone; stopping it is what matters
                pass
            for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.time() + wait
                while time.time() < deadline and procs.alive(self.pid):
                    time.sleep(0.2)
                if not procs.alive(self.pid):
                    # Daemons of the group may outlive the leader by a moment.
                    try:
                        os.killpg(self.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    break
        self.state_path.unlink(missing_ok=True)
        super().shutdown()

    def dashboard_token(self) -> str:
        """The token Ray's dashboard asks for when its page (the "Ray job ↗" link) opens: paste it there.

        It is the head's bearer token (the 0600 file under the config dir); no repr shows it.

        >>> cluster.dashboard_token()   # doctest: +SKIP
        """
        return self._token or ""

    def __repr__(self) -> str:
        return super().__repr__().replace("auth=token)", "token: hidden — cluster.dashboard_token())")

    def _repr_rows(self) -> list[tuple[str, str]]:
        state = "running" if self.running else "stopped"  # not a run state: the Ray head's
        rows = [("token", "hidden — <code>cluster.dashboard_token()</code> gives the one the dashboard asks for")
                if key == "auth" else (key, value) for key, value in super()._repr_rows()]
        return rows + [("head", f"pid {self.pid}, {self.num_cpus} CPUs, {state}"),
                                       ("ports", "exposed on this machine's address" if self.exposed
                                        else "127.0.0.1 only"),
                                       ("temp dir", str(self.temp_dir))]

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.shutdown()


def _ray_command() -> list[str]:
    ray_bin = Path(sys.executable).with_name("ray")
    if ray_bin.exists():
        return [str(ray_bin)]
    return [sys.executable, "-c", "import sys; from ray.scripts.scripts import main; sys.exit(main())"]


def _reuse(state_path: Path, token: str) -> LocalCluster | None:
    try:
        state = json.loads(state_path.read_text())
        cluster = LocalCluster(state["address"], token, temp_dir=Path(state.get("temp_dir") or state_path.parent),
                               pid=int(state["pid"]), num_cpus=int(state["num_cpus"]),
                               log_path=Path(state["log_path"]), state_path=state_path,
                               exposed=bool(state.get("exposed")))
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if not cluster.running:
        state_path.unlink(missing_ok=True)
        return None
    try:
        cluster.ping(timeout=15.0)
    except Exception:
        return None
    return cluster


class _HeadDied(RuntimeError):
    """The head failed while starting; `retry` when another try may go better (a busy machine)."""

    def __init__(self, message: str, *, retry: bool = False) -> None:
        super().__init__(message)
        self.retry = retry


def _startup_boost() -> int:
    """Niceness for the head while it starts: -10 when allowed (`SKYRL_NB_HEAD_NICE` overrides, 0 = off).

    Ray's raylet gives its dashboard agent a hard-coded 15 s to start (ray-project/ray#65983); on a
    loaded 2-core machine a Python agent can need more. The boost ends as soon as the head is up.
    """
    try:
        value = int(os.environ.get("SKYRL_NB_HEAD_NICE", "-10"))
    except ValueError:
        return 0
    return procs.permitted_nice(value)


_AGENTS = ("dashboard/agent.py", "runtime_env/agent/main.py", "raylet/raylet")


def _favor_agents(pgid: int, boost: int) -> None:
    """While the head starts, run the raylet and its two agents ahead of the head's other daemons."""
    for pid in procs.process_group(pgid):
        command = " ".join(procs.cmdline(pid))
        procs.nice(pid, boost if any(agent in command for agent in _AGENTS) else 5)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# ----------------------------------------------------------------------------- watching a start


#: The head's vital daemons as a start's stages, in the order Ray brings them up.
_DAEMON_STAGES = (("gcs_server", "gcs_server up"), ("raylet", "raylet up"), ("dashboard", "dashboard up"))


def _start_head(temp: Path, tok_path: Path, token: str, cpus: int, timeout: float, expose: bool,
                progress: StartProgress | None = None) -> tuple[LocalCluster, subprocess.Popen[bytes], list[int]]:
    ports = _free_ports(8)
    gcs, dash, agent, client, metrics, rt_agent, agent_grpc, dash_metrics = ports
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(key, None)
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(tok_path),
        RAY_USAGE_STATS_ENABLED="0",
        # "0" keeps Ray from swapping 127.0.0.1 for the machine's address: its gRPC servers, agents
        # and metrics then listen on 127.0.0.1 only. Job drivers inherit it and connect the same way.
        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1" if expose else "0",
        # Ray's default is a fixed 44227 on every head: a second head on the machine would clash.
        DASHBOARD_METRIC_PORT=str(dash_metrics),
        # On a busy 2-core machine the dashboard can take over a minute to come up.
        RAY_DASHBOARD_STARTUP_TIMEOUT_S=env.get("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "300"),
        RAY_agent_register_timeout_ms=env.get("RAY_agent_register_timeout_ms", "120000"),
        RAY_raylet_start_wait_time_s=env.get("RAY_raylet_start_wait_time_s", "120"),
        # Actor workers import torch; on a loaded machine that can take longer than Ray's 60 s.
        RAY_worker_register_timeout_seconds=env.get("RAY_worker_register_timeout_seconds", "300"),
        # Jobs run `python` from the head's PATH: make that the kernel's environment.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    short_tmp = process_tmpdir(temp)
    if short_tmp:
        env["TMPDIR"] = short_tmp
    log_path = temp / "head.log"
    cmd = _ray_command() + [
        "start", "--head", "--block",
        "--port", str(gcs),
        "--dashboard-host", "0.0.0.0" if expose else "127.0.0.1",
        "--dashboard-port", str(dash),
        "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc),
        "--runtime-env-agent-port", str(rt_agent),
        "--ray-client-server-port", str(client),
        "--metrics-export-port", str(metrics),
        *([] if expose else ["--node-ip-address", "127.0.0.1"]),
        "--num-cpus", str(cpus),
        "--temp-dir", str(temp),
        "--include-dashboard", "true",
        "--disable-usage-stats",
        "--no-monitor",  # no autoscaler on a fixed local node: one process less on a small machine
    ]
    log_start = log_path.stat().st_size if log_path.exists() else 0
    boost = _startup_boost()
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    if boost:
        # `ray start` spends seconds importing before it forks anything, so its daemons inherit this;
        # the head is a new session, so its autogroup's niceness is what counts.
        procs.nice_with_autogroup(proc.pid, boost)
    cluster = LocalCluster(f"http://127.0.0.1:{dash}", token, temp_dir=temp, pid=proc.pid, num_cpus=cpus,
                           log_path=log_path, exposed=expose)
    watch = _StartWatch(temp, proc.pid)
    progress = progress or StartProgress(False)
    progress.stage(f"`ray start` launched (pid {proc.pid}, {cpus} CPUs)")
    said: set[str] = set()
    started = time.time()
    deadline = started + timeout
    last: Exception | None = None
    next_look = 0.0
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path, "rb") as f:
                f.seek(log_start)
                said = f.read().decode(errors="replace")
            _kill_group(proc.pid)  # daemons it left behind
            lines = [ln.strip() for ln in said.splitlines() if ln.strip()]
            reason = next((ln for ln in reversed(lines) if _PY_ERROR.match(ln)), lines[-1] if lines else "")
            found = watch.cause(None)
            message = (f"`ray start` exited with code {proc.returncode}: "
                       + (f"{found[0]} (log: {found[1]})" if found else f"{reason[:400]} (log: {log_path})"))
            raise _HeadDied(message, retry=not any(marker in message for marker in _FOR_GOOD))
        if time.time() >= next_look:  # /proc and the logs once a second: cheap on a busy machine
            next_look = time.time() + 1.0
            if boost:
                _favor_agents(proc.pid, boost)
            dead = watch.dead_daemon()
            up = {name for name, _ in watch.seen}
            for name, text in _DAEMON_STAGES:
                if name in up and name not in said:
                    said.add(name)
                    progress.stage(text)
            refused = watch.socket_refused()
            if dead or refused:
                message = watch.describe(dead)
                _kill_group(proc.pid)
                proc.wait(timeout=30)
                # Ray's raylet gives its agents a fixed 15 s; on a busy machine it gives up and `ray
                # start` then hangs for minutes. That one is worth another try; the rest are not.
                message = f"the Ray head could not start: {message}"
                raise _HeadDied(message, retry=dead == "raylet" and not any(m in message for m in _FOR_GOOD))
        try:
            with open(log_path, "rb") as f:
                f.seek(log_start)
                # `ray start --block` says this once every process is up and registered.
                up = b"block forever" in f.read()
            if up:
                cluster.ping(timeout=5.0)
                cluster.client.list_jobs()
                progress.stage("Jobs API answering")
                if boost:
                    procs.renice_group(proc.pid, 0)
                    procs.autogroup_nice(proc.pid, 0)
                return cluster, proc, ports
        except Exception as exc:
            last = exc
            cluster._client_obj = None
        progress.tick()
        time.sleep(0.2)
    cause = watch.describe(watch.dead_daemon())
    cluster.shutdown()
    raise TimeoutError(f"the Ray head did not come up within {timeout:.0f} s: "
                       + (f"{type(last).__name__}: {last}; " if last else "") + cause)


def local(
    *,
    num_cpus: int | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
    token_path: str | os.PathLike[str] | None = None,
    start: bool = True,
    timeout: float = 300.0,
    expose: bool | None = None,
    progress: bool | None = None,
) -> LocalCluster | None:
    """Start, or reuse, the embedded Ray head on this machine and return it.

    `num_cpus` defaults to the machine's cores. `temp_dir` is Ray's temp dir; by default a short
    per-user folder, `<tmp>/skyrl-<uid>/<8 hex>`, because Ray's socket paths under it must fit in 107
    bytes (a temp dir too long for that is refused at once). The token lives in
    `~/.config/skyrl-nb/ray_token` (0600). With `start=False` only an already running head is returned
    (else None), and nothing is written.

    `expose=False` binds every port of the head (GCS, raylet, dashboard, its agents, Ray client,
    metrics) to 127.0.0.1, so only this machine reaches it. `expose=True` lets Ray listen on the
    machine's address and the dashboard on all interfaces, so other machines can submit jobs or join;
    the token still guards the dashboard. `None` (the default): a running head as it is, a new one
    with `expose=False`. Asking for the other setting than a running head's raises `ValueError`.

    A head that cannot come up (a Ray daemon dies while it starts) is reported within seconds, with
    the line from Ray's logs that says why; `timeout` bounds the whole start. While a head starts, each
    stage it reaches and the seconds so far are shown (`progress=None`: a small widget in JupyterLab,
    lines of text elsewhere; `False`: quiet).

    >>> cluster = skyrl_nb.cluster.local()
    >>> cluster.dashboard_url
    """
    if temp_dir is not None:
        temp: Path | None = Path(temp_dir).expanduser().resolve()
        if start:
            check_temp_dir(temp)  # before anything is written or started
        state_dir = temp
    else:
        temp, state_dir = None, cache_dir() / "ray"
    tok_path = Path(token_path or config_dir() / "ray_token").expanduser()
    if start:
        writable_dir(tok_path.parent, "token folder" if token_path else "config dir",
                     "token_path=" if token_path else "SKYRL_NB_CONFIG_DIR")
    token = ensure_token(tok_path) if start else read_token_file(tok_path)
    if token is None:
        return None  # no token, no head of ours: a lookup creates nothing
    reused = _reuse(state_dir / STATE_FILE, token)
    if reused is not None or not start:
        if reused is not None and expose is not None and reused.exposed != expose:
            raise ValueError(f"a local Ray head (pid {reused.pid}) already runs with "
                             + ("its ports exposed" if reused.exposed else "its ports on 127.0.0.1 only")
                             + f"; shut it down (cluster.shutdown()) to start one with expose={expose}")
        if reused is not None and start:
            StartProgress(progress).done(f"reusing the running head (pid {reused.pid}) at {reused.dashboard_url}")
        return reused

    writable_dir(state_dir, "Ray temp dir" if temp_dir is not None else "cache dir",
                 "temp_dir=" if temp_dir is not None else "SKYRL_NB_CACHE_DIR")
    temp = temp or default_temp_dir(state_dir)
    temp.mkdir(parents=True, exist_ok=True)
    cpus = int(num_cpus or os.cpu_count() or 1)
    said = StartProgress(progress)
    # Ray's raylet gives its dashboard agent a hard-coded 15 s (ray-project/ray#65983); a busy
    # machine can miss that. Each such failure is seen within seconds: try again, a few times.
    deadline = time.time() + timeout
    attempts = 0
    while True:
        attempts += 1
        try:
            cluster, proc, ports = _start_head(temp, tok_path, token, cpus, max(30.0, deadline - time.time()),
                                               bool(expose), said)
            break
        except _HeadDied as err:
            if not err.retry or attempts >= START_ATTEMPTS or time.time() > deadline - 30:
                said.done(f"could not start: {err}", ok=False)
                raise RuntimeError(f"could not start a local Ray head ({attempts} attempt(s)): {err}") from None
            said.stage(f"attempt {attempts} failed ({err}); trying again")
        except Exception as err:
            said.done(f"could not start: {type(err).__name__}: {err}", ok=False)
            raise
    cluster.state_path = state_dir / STATE_FILE
    state = {"pid": proc.pid, "address": cluster.address, "num_cpus": cpus, "log_path": str(cluster.log_path),
             "temp_dir": str(temp), "exposed": bool(expose), "gcs_port": ports[0], "started_at": time.time()}
    # atomic: another kernel may be reading it to decide whether to reuse this head
    atomic_write_text(cluster.state_path, json.dumps(state))
    said.done(f"ready at {cluster.dashboard_url}")
    return cluster
