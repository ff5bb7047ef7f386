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
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from skyrl_core import procs
from skyrl_core.choices import RunState
from skyrl_core.frontend import widget_frontend
from skyrl_core.runs import atomic_write_text
from skyrl_nb.cluster.addresses import display_dashboard_url, read_token_file
from skyrl_nb.cluster.base import Cluster

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


#: Ray refuses an AF_UNIX socket path longer than this many bytes (`validate_socket_filepath`).
SOCKET_PATH_LIMIT = 103 if sys.platform == "darwin" else 107
#: The longest name Ray gives a socket in `<session>/sockets/`: a dashboard module's `dash_<Module>`,
#: `dash_TaskEventsHead` (19) in Ray 2.60, with room for a longer module in a later Ray.
_SOCKET_NAME_BYTES = 24
#: `<temp>/session_<date>_<time>_<usec>_<pid>/sockets/`, less the temp dir and the pid's digits.
_SESSION_BYTES = len("/session_2026-12-01_02-11-17_099300_") + len("/sockets/")


def socket_path_bytes(temp_dir: str | os.PathLike[str]) -> int:
    """Bytes in the longest AF_UNIX path Ray makes under `temp_dir`, counting the worst case.

    That path is `<temp>/session_<date>_<time>_<usec>_<pid>/sockets/<name>`: the pid takes as many
    digits as the largest pid this machine hands out.
    """
    return len(os.fsencode(temp_dir)) + _SESSION_BYTES + len(str(procs.max_pid())) + _SOCKET_NAME_BYTES


def check_temp_dir(temp_dir: str | os.PathLike[str]) -> None:
    """Raise `ValueError` (one line: the path, its length, the limit) when Ray's sockets would not fit under it."""
    longest = socket_path_bytes(temp_dir)
    if longest > SOCKET_PATH_LIMIT:
        room = SOCKET_PATH_LIMIT - (longest - len(os.fsencode(temp_dir)))
        raise ValueError(
            f"Ray temp dir {os.fspath(temp_dir)!r} is {len(os.fsencode(temp_dir))} bytes: Ray's socket paths under it "
            f"would reach {longest} bytes, over the AF_UNIX limit of {SOCKET_PATH_LIMIT}; use a temp_dir of at "
            f"most {room} bytes, e.g. under /tmp")


def _private_dir(path: Path) -> bool:
    """Make `path` (mode 0700) or accept it when it is a real folder of ours that we may write."""
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = path.lstat()
        if not os.path.isdir(path) or os.path.islink(path):
            return False
        if hasattr(os, "getuid") and st.st_uid != os.getuid():
            return False  # someone else made it first in a shared /tmp: never run Ray in their folder
        if st.st_mode & 0o077:
            os.chmod(path, 0o700)
        return os.access(path, os.W_OK | os.X_OK)
    except OSError:
        return False


def default_temp_dir(key: str | os.PathLike[str]) -> Path:
    """A short per-user Ray temp dir, `<tmp>/skyrl-<uid>/<8 hex of key>` (``$TMPDIR``, else /tmp).

    `key` (the state dir) keeps heads of different config/cache dirs apart. Raises `RuntimeError`
    naming the path, its length and the limit when no candidate is both short enough and writable.
    """
    user = str(os.getuid()) if hasattr(os, "getuid") else os.environ.get("USERNAME", "user")
    name = hashlib.sha256(os.fsencode(os.fspath(key))).hexdigest()[:8]
    problems = []
    for base in dict.fromkeys([tempfile.gettempdir(), "/tmp"]):
        path = Path(base) / f"skyrl-{user}" / name
        try:
            check_temp_dir(path)
        except ValueError as err:
            problems.append(str(err))
            continue
        if _private_dir(path.parent):
            return path
        problems.append(f"{path.parent} is not a folder of ours we can write")
    raise RuntimeError("no short writable folder for Ray's temp dir: " + "; ".join(problems)
                       + "; pass cluster.local(temp_dir=...)")


def writable_dir(path: Path, what: str, setting: str) -> Path:
    """Make `path` (0700) and return it, or raise `OSError` in one line naming it and the `setting` that moves it.

    A read-only or foreign HOME otherwise surfaces as a bare ``Read-only file system: '.../.config'``.
    """
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not os.access(path, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as err:
        raise OSError(f"skyrl-nb's {what} {str(path)!r} is not usable ({err.strerror or err}); "
                      f"set {setting} to a folder you can write") from None
    return path


#: Bytes multiprocessing adds under ``$TMPDIR`` for a forkserver socket: ``/pymp-XXXXXXXX/listener-XXXXXXXX``.
_MP_SOCKET_BYTES = len("/pymp-12345678/listener-12345678")


def process_tmpdir(short_dir: Path, tmpdir: str | None = None) -> str | None:
    """The ``TMPDIR`` Ray's processes should get instead of ``tmpdir`` (default ``$TMPDIR``), or None to keep it.

    Ray's dashboard starts a multiprocessing forkserver whose socket lives under ``$TMPDIR``; a
    ``$TMPDIR`` too long for an AF_UNIX path, missing or not writable makes the head hang until its
    timeout. Such a ``$TMPDIR`` is swapped for `short_dir` (the head's own short temp dir).
    """
    tmpdir = os.environ.get("TMPDIR") if tmpdir is None else tmpdir
    if not tmpdir:
        return None
    too_long = len(os.fsencode(tmpdir)) + _MP_SOCKET_BYTES > SOCKET_PATH_LIMIT
    if too_long or not os.path.isdir(tmpdir) or not os.access(tmpdir, os.W_OK | os.X_OK):
        return str(short_dir)
    return None


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
        return _alive(self.pid)

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
                while time.time() < deadline and _alive(self.pid):
                    time.sleep(0.2)
                if not _alive(self.pid):
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

_SOCKET_TOO_LONG = re.compile(r"validate_socket_filename failed.*")
_PY_ERROR = re.compile(r"^[A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b:?.*$")
_CPP_FATAL = re.compile(r"Check failed.*|^\[[^\]]* [CF] \d+ \d+\].*")
_MODULE_FAILED = re.compile(r"Module (\w+) failed to start")
#: Causes another try cannot cure.
_FOR_GOOD = ("validate_socket_filename", "ValueError", "PermissionError", "ImportError", "ModuleNotFoundError",
             "No space left")
#: Tries at most, when a daemon dies of something another try may cure (a busy machine).
START_ATTEMPTS = 3


def _daemon(args: list[str]) -> str | None:
    """Which of the head's vital daemons a command line is: gcs_server, raylet, dashboard, or None."""
    if not args:
        return None
    exe = os.path.basename(args[0])
    if exe in ("gcs_server", "raylet"):
        return exe
    if any(arg.endswith(os.path.join("dashboard", "dashboard.py")) for arg in args[1:3]):
        return "dashboard"
    return None


def _tail_text(path: Path, limit: int = 65536) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.fstat(f.fileno()).st_size - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def _last_line(path: Path, pattern: re.Pattern[str]) -> str | None:
    """The last line of `path`'s tail that `pattern` finds, as found (a line of a traceback, a glog line)."""
    for line in reversed(_tail_text(path).splitlines()):
        m = pattern.search(line.strip())
        if m:
            return " ".join(m.group(0).split())[:400]
    return None


class _StartWatch:
    """The head's vital daemons and Ray's logs while `ray start` (pid `pid`) brings a head up in `temp`."""

    def __init__(self, temp: Path, pid: int) -> None:
        self.temp = temp
        self.pid = pid
        self.seen: set[tuple[str, int]] = set()

    def logs_dir(self) -> Path | None:
        """`<temp>/session_<date>_<time>_<usec>_<pid>/logs`: `ray start` names the session after itself."""
        for session in self.temp.glob(f"session_*_{self.pid}"):
            return session / "logs"
        return None

    def dead_daemon(self) -> str | None:
        """The name of a vital daemon that was seen running and is gone (or a zombie) now."""
        self.seen |= {(name, pid) for pid in procs.process_group(self.pid)
                      if (name := _daemon(procs.cmdline(pid))) is not None}
        return next((name for name, pid in sorted(self.seen) if procs.started_at(pid) is None), None)

    def socket_refused(self) -> tuple[str, Path] | None:
        """Ray's 'validate_socket_filename failed' line and its log, if any daemon wrote one."""
        logs = self.logs_dir()
        if logs is None:
            return None
        for path in sorted(logs.glob("*.err")) + sorted(logs.glob("dashboard*.log")):
            line = _last_line(path, _SOCKET_TOO_LONG)
            if line:
                return line, path
        return None

    def cause(self, dead: str | None) -> tuple[str, Path] | None:
        """The line of Ray's logs that says why the head cannot come up, and the log it is in."""
        found = self.socket_refused()
        logs = self.logs_dir()
        if found or logs is None:
            return found
        if dead == "dashboard":
            line = _last_line(logs / "dashboard.err", _PY_ERROR)
            module = _MODULE_FAILED.search(line or "")
            if module:  # the module's own log holds the root cause
                for path in (logs / f"dashboard_{module.group(1)}.err", logs / f"dashboard_{module.group(1)}.log"):
                    root = _last_line(path, _PY_ERROR)
                    if root:
                        return root, path
            return (line, logs / "dashboard.err") if line else None
        for name in ([dead] if dead else ["raylet", "gcs_server"]):
            for path in (logs / f"{name}.out", logs / f"{name}.err"):
                line = _last_line(path, _CPP_FATAL)
                if line:
                    return line, path
        return None

    def describe(self, dead: str | None) -> str:
        """One line: the cause quoted with its log, else which daemon died and where the logs are."""
        found = self.cause(dead)
        if found:
            return f"{found[0]} (log: {found[1]})"
        what = f"its {dead} process exited" if dead else "no error in Ray's logs"
        return f"{what} (logs: {self.logs_dir() or self.temp})"


class StartProgress:
    """What `local()` says while a head starts: each stage with the seconds since the start, as a small
    widget where a widget front end draws it (its clock ticks while it waits), else one line of text per
    stage (``local Ray head: raylet up (3.1 s)``; papermill keeps them in the output). ``enabled=False``:
    nothing is said."""

    def __init__(self, enabled: bool | None = None) -> None:
        self.started = time.monotonic()
        self.stages: list[tuple[str, float]] = []
        self.mode = None if enabled is False else ("widget" if widget_frontend() else "text")
        self._view: Any = None
        self._drawn = 0.0

    def seconds(self) -> float:
        """Seconds since the start."""
        return time.monotonic() - self.started

    def stage(self, text: str) -> None:
        """Say that the head reached ``text`` (``raylet up``)."""
        self.stages.append((text, self.seconds()))
        if self.mode == "text":
            print(f"local Ray head: {text} ({self.stages[-1][1]:.1f} s)", flush=True)
        self._draw(force=True)

    def tick(self) -> None:
        """Let the widget's clock move on (at most once a second)."""
        self._draw()

    def done(self, text: str, ok: bool = True) -> None:
        """The last stage: up (``ok``), or why not."""
        self.stage(text)
        self._draw(force=True, done=True, ok=ok)

    def _draw(self, force: bool = False, done: bool = False, ok: bool = True) -> None:
        if self.mode != "widget" or (not force and time.monotonic() - self._drawn < 1.0):
            return
        self._drawn = time.monotonic()
        from skyrl_widgets.cluster_panel import start_progress_html

        html_text = start_progress_html("local Ray head", self.stages, self.seconds(), done=done, ok=ok)
        if self._view is None:
            import ipywidgets
            from IPython.display import display

            self._view = ipywidgets.HTML(html_text)
            display(self._view)
        else:
            self._view.value = html_text


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
