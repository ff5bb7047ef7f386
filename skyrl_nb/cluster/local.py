"""The embedded local cluster: a Ray head in its own process group, started (or reused) by `local()`.

The head runs `ray start --head --block` as a child process in a new session, with a private
`--temp-dir`, the dashboard on 127.0.0.1 at a free port, token auth forced on (`RAY_AUTH_MODE=token`
and `RAY_AUTH_TOKEN_PATH` pointing at a 0600 file under the user's config dir) and usage stats off.
A state file in the temp dir lets a later kernel reuse the same head. `shutdown()` stops running
jobs, then signals the head's process group (and nothing else).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from skyrl_core import procs
from skyrl_core.runs import atomic_write_text
from skyrl_nb.cluster.base import Cluster, display_dashboard_url, read_token_file

STATE_FILE = "skyrl-nb-head.json"


def config_dir() -> Path:
    """skyrl-nb's config dir: `$SKYRL_NB_CONFIG_DIR`, else `$XDG_CONFIG_HOME/skyrl-nb`, else `~/.config/skyrl-nb`."""
    if os.environ.get("SKYRL_NB_CONFIG_DIR"):
        return Path(os.environ["SKYRL_NB_CONFIG_DIR"]).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "skyrl-nb"


def cache_dir() -> Path:
    """skyrl-nb's cache dir: `$SKYRL_NB_CACHE_DIR`, else `$XDG_CACHE_HOME/skyrl-nb`, else `~/.cache/skyrl-nb`."""
    if os.environ.get("SKYRL_NB_CACHE_DIR"):
        return Path(os.environ["SKYRL_NB_CACHE_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "skyrl-nb"


def ensure_token(path: Path) -> str:
    """The token in `path`, generating one (0600 file, 0700 dir) when missing."""
    token = read_token_file(path)
    if token:
        if path.stat().st_mode & 0o077:
            os.chmod(path, 0o600)
        return token
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token)
    return token


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); reap it if it is ours.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


class LocalCluster(Cluster):
    """A Ray head on this machine, owned by skyrl-nb (see `local()`)."""

    def __init__(self, address: str, token: str, *, temp_dir: Path, pid: int, num_cpus: int,
                 log_path: Path, name: str = "local") -> None:
        super().__init__(address, token, name=name, dashboard_url=display_dashboard_url(address))
        self.python = sys.executable
        self.temp_dir = temp_dir
        self.pid = pid
        self.num_cpus = num_cpus
        self.log_path = log_path

    @property
    def running(self) -> bool:
        """Whether the head process is still alive."""
        return _alive(self.pid)

    def shutdown(self, timeout: float = 15.0) -> None:
        """Stop running jobs, then the head's process group; the state file goes too."""
        if self.running:
            try:
                for job in self.jobs():
                    if job.status() in ("pending", "running"):
                        job.stop()
            except Exception:  # the head may already be half gone; stopping it is what matters
                pass
            for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(self.pid, sig)
                except ProcessLookupError:
                    break
                deadline = time.time() + wait
                while time.time() < deadline and _alive(self.pid):
                    time.sleep(0.2)
                if not _alive(self.pid):
                    # Daemons of the group may outlive the leader by a moment.
                    try:
                        os.killpg(self.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    break
        (self.temp_dir / STATE_FILE).unlink(missing_ok=True)
        super().shutdown()

    def _repr_rows(self) -> list[tuple[str, str]]:
        state = "running" if self.running else "stopped"
        return super()._repr_rows() + [("head", f"pid {self.pid}, {self.num_cpus} CPUs, {state}"),
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


def _reuse(temp_dir: Path, token: str) -> LocalCluster | None:
    state_path = temp_dir / STATE_FILE
    try:
        state = json.loads(state_path.read_text())
    except (OSError, ValueError):
        return None
    cluster = LocalCluster(state["address"], token, temp_dir=temp_dir, pid=int(state["pid"]),
                           num_cpus=int(state["num_cpus"]), log_path=Path(state["log_path"]))
    if not cluster.running:
        state_path.unlink(missing_ok=True)
        return None
    try:
        cluster.ping(timeout=15.0)
    except Exception:
        return None
    return cluster


class _HeadDied(RuntimeError):
    pass


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


def _raylet_crashed(temp: Path, since: float) -> bool:
    session = temp / "session_latest"
    raylet_out = session / "logs" / "raylet.out"
    try:
        if session.resolve().stat().st_mtime < since - 1:
            return False  # an older session's logs
        with open(raylet_out, "rb") as f:
            return b"Check failed" in f.read()
    except OSError:
        return False


def _start_head(temp: Path, tok_path: Path, token: str, cpus: int,
                timeout: float) -> tuple[LocalCluster, subprocess.Popen[bytes], list[int]]:
    ports = _free_ports(7)
    gcs, dash, agent, client, metrics, rt_agent, agent_grpc = ports
    env = dict(os.environ)
    for key in ("RAY_ADDRESS", "RAY_AUTH_TOKEN"):
        env.pop(key, None)
    env.update(
        RAY_AUTH_MODE="token",
        RAY_AUTH_TOKEN_PATH=str(tok_path),
        RAY_USAGE_STATS_ENABLED="0",
        # On a busy 2-core machine the dashboard can take over a minute to come up.
        RAY_DASHBOARD_STARTUP_TIMEOUT_S=env.get("RAY_DASHBOARD_STARTUP_TIMEOUT_S", "300"),
        RAY_agent_register_timeout_ms=env.get("RAY_agent_register_timeout_ms", "120000"),
        RAY_raylet_start_wait_time_s=env.get("RAY_raylet_start_wait_time_s", "120"),
        # Actor workers import torch; on a loaded machine that can take longer than Ray's 60 s.
        RAY_worker_register_timeout_seconds=env.get("RAY_worker_register_timeout_seconds", "300"),
        # Jobs run `python` from the head's PATH: make that the kernel's environment.
        PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]),
    )
    log_path = temp / "head.log"
    cmd = _ray_command() + [
        "start", "--head", "--block",
        "--port", str(gcs),
        "--dashboard-host", "127.0.0.1",
        "--dashboard-port", str(dash),
        "--dashboard-agent-listen-port", str(agent),
        "--dashboard-agent-grpc-port", str(agent_grpc),
        "--runtime-env-agent-port", str(rt_agent),
        "--ray-client-server-port", str(client),
        "--metrics-export-port", str(metrics),
        "--node-ip-address", "127.0.0.1",
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
                           log_path=log_path)
    started = time.time()
    deadline = started + timeout
    last: Exception | None = None
    while time.time() < deadline:
        if proc.poll() is not None:
            with open(log_path, "rb") as f:
                f.seek(log_start)
                tail = f.read().decode(errors="replace")[-1500:]
            _kill_group(proc.pid)  # daemons it left behind
            raise _HeadDied(f"the Ray head exited with code {proc.returncode}; log {log_path}:\n{tail}")
        if boost:
            _favor_agents(proc.pid, boost)
        if _raylet_crashed(temp, started):
            # Ray's raylet gives its agents a fixed 15 s; on a busy machine it gives up and
            # `ray start` then hangs for minutes. Cut that short and let the caller retry.
            _kill_group(proc.pid)
            proc.wait(timeout=30)
            raise _HeadDied(f"the Ray head's raylet died during startup (slow machine?); see {temp}/session_latest/logs")
        try:
            with open(log_path, "rb") as f:
                f.seek(log_start)
                # `ray start --block` says this once every process is up and registered.
                up = b"block forever" in f.read()
            if up:
                cluster.ping(timeout=5.0)
                cluster.client.list_jobs()
                if boost:
                    procs.renice_group(proc.pid, 0)
                    procs.autogroup_nice(proc.pid, 0)
                return cluster, proc, ports
        except Exception as exc:
            last = exc
            cluster._client_obj = None
        time.sleep(0.2)
    cluster.shutdown()
    raise TimeoutError(f"the Ray head did not come up within {timeout:.0f} s ({last}); log {log_path}")


def local(
    *,
    num_cpus: int | None = None,
    temp_dir: str | os.PathLike[str] | None = None,
    token_path: str | os.PathLike[str] | None = None,
    start: bool = True,
    timeout: float = 300.0,
) -> LocalCluster | None:
    """Start, or reuse, the embedded Ray head on this machine and return it.

    `num_cpus` defaults to the machine's cores; `temp_dir` to `~/.cache/skyrl-nb/ray`; the token
    lives in `~/.config/skyrl-nb/ray_token` (0600). With `start=False` only an already running head
    is returned (else None).

    >>> cluster = skyrl_nb.cluster.local()
    >>> cluster.dashboard_url
    """
    temp = Path(temp_dir or cache_dir() / "ray").expanduser().resolve()
    tok_path = Path(token_path or config_dir() / "ray_token").expanduser()
    token = ensure_token(tok_path)
    reused = _reuse(temp, token)
    if reused is not None or not start:
        return reused

    temp.mkdir(parents=True, exist_ok=True)
    cpus = int(num_cpus or os.cpu_count() or 1)
    # Ray's raylet gives its dashboard agent a hard-coded 15 s (ray-project/ray#65983); a busy
    # machine can miss that. Each failure is seen within seconds: try again until `timeout`.
    deadline = time.time() + timeout
    attempts = 0
    while True:
        attempts += 1
        try:
            cluster, proc, ports = _start_head(temp, tok_path, token, cpus, max(30.0, deadline - time.time()))
            break
        except _HeadDied as err:
            if time.time() > deadline - 30 or "ValueError" in str(err):
                raise RuntimeError(f"could not start a local Ray head in {attempts} attempt(s): {err}") from None
    state = {"pid": proc.pid, "address": cluster.address, "num_cpus": cpus, "log_path": str(cluster.log_path),
             "gcs_port": ports[0], "started_at": time.time()}
    # atomic: another kernel may be reading it to decide whether to reuse this head
    atomic_write_text(temp / STATE_FILE, json.dumps(state))
    return cluster
